"""dcgm-exporter's Prometheus text page, read into one record per GPU.

NVIDIA's dcgm-exporter serves one sample per DCGM field and GPU, labelled `gpu` (the index in
the host), `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname` and
`DCGM_FI_DRIVER_VERSION`; newer versions add `err_code` and `err_msg` to the Xid field. The
page is parsed with prometheus-client's text parser (the exposition format's own reader), so
a page read through a Prometheus server's `/federate` (extra `instance` and `job` labels, time
stamps) reads the same. Only the fields rackscale acts on are kept.
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rackscale.errors import UserError
from rackscale.inputs import read_text

if TYPE_CHECKING:  # prometheus-client is an optional extra, imported when a page is read
    from prometheus_client.metrics_core import Metric

XID = "DCGM_FI_DEV_XID_ERRORS"
ECC_DBE = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
ROW_REMAP_FAILURE = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
NVLINK_CRC = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
THERMAL_VIOLATION = "DCGM_FI_DEV_THERMAL_VIOLATION"
POWER_VIOLATION = "DCGM_FI_DEV_POWER_VIOLATION"
FIELDS = (XID, ECC_DBE, ROW_REMAP_FAILURE, NVLINK_CRC, THERMAL_VIOLATION, POWER_VIOLATION)
# Per-link NVLink CRC flit counters (L0..L17); their sum stands in for the total when a page
# carries only these.
_LINK = re.compile(r"^DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L(\d+)$")
MAX_PAGE_BYTES = 64 << 20  # a host's page is tens of kB; a Prometheus federation more
FETCH_TIMEOUT_S = 10.0


class TelemetryError(UserError):
    """A telemetry source that cannot be read or is not dcgm-exporter's page."""


@dataclass(slots=True)
class GpuTelemetry:
    """One GPU's fields from one page (the latest sample of each, when a page repeats one)."""

    host: str
    gpu: int
    labels: dict[str, str] = field(default_factory=dict)  # UUID, pci_bus_id, modelName, ...
    values: dict[str, float] = field(default_factory=dict)
    links: dict[int, float] = field(default_factory=dict)  # NVLink CRC flit errors per link

    @property
    def crc_total(self) -> float | None:
        if NVLINK_CRC in self.values:
            return self.values[NVLINK_CRC]
        return sum(self.links.values()) if self.links else None


@dataclass(slots=True)
class Page:
    source: str
    gpus: list[GpuTelemetry]
    # Samples of the fields rackscale reads that carry no usable Hostname or gpu label.
    unlabelled: list[str] = field(default_factory=list)


def read_source(source: str) -> str:
    """The text at `source`: an http(s) URL (fetched) or a file."""
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=FETCH_TIMEOUT_S) as resp:
                raw: bytes = resp.read(MAX_PAGE_BYTES + 1)  # urlopen's response is untyped
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise TelemetryError(f"--dcgm {source}: cannot fetch it ({err}); check that "
                                 "dcgm-exporter (or Prometheus) listens there") from None
        if len(raw) > MAX_PAGE_BYTES:
            raise TelemetryError(f"--dcgm {source}: the page is over {MAX_PAGE_BYTES >> 20} "
                                 "MiB; scrape the hosts one by one")
        return raw.decode("utf-8", errors="replace")
    if not Path(source).is_file():
        raise TelemetryError(f"--dcgm {source}: no such file, and not an http(s) URL; give "
                             "dcgm-exporter's /metrics URL or a saved page")
    return read_text(source, "dcgm-exporter page", max_bytes=MAX_PAGE_BYTES,
                     error=TelemetryError)


def _bad_line(text: str) -> tuple[int, str] | None:
    """The first line the text parser refuses on its own, with its number (1-based)."""
    from prometheus_client.parser import text_string_to_metric_families

    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        try:
            list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            return no, line
    return None


def _families(text: str, source: str) -> list[Metric]:
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        raise TelemetryError("reading dcgm-exporter needs prometheus-client: pip install "
                             "'rackscale[server]'") from None
    try:
        return list(text_string_to_metric_families(text))
    except ValueError as err:
        bad = _bad_line(text)
        where = f"{source}:{bad[0]}: {bad[1][:120]!r}" if bad else source
        raise TelemetryError(f"{where}: not Prometheus text ({err}); give dcgm-exporter's "
                             "/metrics page (curl it to see what it serves)") from None


def parse_page(text: str, source: str) -> Page:
    """The GPUs of a page, in the order they first appear. Raises TelemetryError on text the
    parser refuses (naming the line) and on a page without a DCGM field rackscale reads."""
    gpus: dict[tuple[str, int], GpuTelemetry] = {}
    unlabelled: list[str] = []
    seen = 0
    for fam in _families(text, source):
        name = fam.name
        link = _LINK.match(name)
        if name not in FIELDS and link is None:
            continue
        for s in fam.samples:
            if s.name not in (name, name + "_total"):  # a counter's `_created` is no value
                continue
            seen += 1
            host, index = s.labels.get("Hostname", ""), s.labels.get("gpu", "")
            if not host or not index.isdigit():
                unlabelled.append(f"{name}{{Hostname={host!r}, gpu={index!r}}}")
                continue
            g = gpus.setdefault((host, int(index)), GpuTelemetry(host=host, gpu=int(index)))
            g.labels.update({k: v for k, v in s.labels.items() if k not in ("Hostname", "gpu")})
            if link is not None:
                g.links[int(link.group(1))] = float(s.value)
            else:
                g.values[name] = float(s.value)
    if not seen:
        raise TelemetryError(f"{source}: no dcgm-exporter field rackscale reads "
                             f"({', '.join(FIELDS)}); is this dcgm-exporter's /metrics "
                             "page, with those fields enabled in its counters file?")
    return Page(source=source, gpus=list(gpus.values()), unlabelled=unlabelled)
