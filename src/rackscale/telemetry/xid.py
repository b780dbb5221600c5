"""Which Xid errors are the GPU's fault and which the application's (NVIDIA's Xid catalog,
https://docs.nvidia.com/deploy/xid-errors/; docs/figures.md has the table with its source).

A hardware Xid fails the GPU (its tray goes to triage like a failing certification); an
application Xid is the job's doing (a bad kernel, a killed process) and fails nothing. An Xid
in neither list is reported by `telemetry scrape` as unclassified and recorded nowhere: the
table is extended from NVIDIA's catalog, not guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rackscale.faults import GPU_DEAD, HBM_DEGRADED, NVLINK_PORT_DOWN

XidClass = Literal["hardware", "application"]


@dataclass(frozen=True, slots=True)
class Xid:
    code: int
    cls: XidClass
    meaning: str
    kind: str | None = None  # the fault kind a hardware Xid is recorded as


XIDS: dict[int, Xid] = {x.code: x for x in (
    Xid(13, "application", "graphics engine exception"),
    Xid(31, "application", "GPU memory page fault"),
    Xid(43, "application", "GPU stopped processing"),
    Xid(45, "application", "preemptive cleanup, due to previous errors"),
    Xid(48, "hardware", "double-bit ECC error", HBM_DEGRADED),
    Xid(63, "hardware", "ECC page retirement or row remapping recording event", HBM_DEGRADED),
    Xid(64, "hardware", "ECC page retirement or row remapper recording failure", HBM_DEGRADED),
    Xid(74, "hardware", "NVLink error", NVLINK_PORT_DOWN),
    Xid(79, "hardware", "GPU has fallen off the bus", GPU_DEAD),
    Xid(92, "hardware", "high single-bit ECC error rate", HBM_DEGRADED),
    Xid(94, "hardware", "contained ECC error", HBM_DEGRADED),
    Xid(95, "hardware", "uncontained ECC error", HBM_DEGRADED),
)}


def classify(code: int) -> Xid | None:
    """The catalog entry of Xid `code`, or None when it is not in the table."""
    return XIDS.get(code)
