"""What one dcgm-exporter page says about the fleet: findings, skipped hosts and GPUs, and the
counters to remember. Pure: the store's part (baselines in, events out) is `record.py`.

The rules (figures and sources in docs/figures.md):
- a hardware Xid (`xid.py`) fails the GPU as the Xid's fault kind; an application Xid, or one
  not in the table, is noted and fails nothing;
- `DCGM_FI_DEV_ECC_DBE_VOL_TOTAL` > 0 (an uncorrectable ECC error since the driver loaded) and
  `DCGM_FI_DEV_ROW_REMAP_FAILURE` = 1 (no spare row left to remap) fail the GPU (hbm_degraded);
- NVLink CRC flit errors that rose since the tray's last recorded counters are a `warn` finding
  (nvlink_port_down): corrected by replay, a sign of a link going bad, not a failure; NVLink
  Xid 74 is the failure;
- thermal or power throttling (the violation counters rose) on at least half of a rack's
  reporting GPUs is the rack's cooling, not its GPUs: one coolant_flow_low finding on the
  rack's CDU, failing unless the lifecycle's coolant response already has the rack (then the
  throttling is explained and the finding is a warn); throttling on fewer is a `warn`
  slow_gpu finding on each GPU.
A rise needs counters to compare with: a tray's first page records them and finds no rise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from rackscale.faults import COOLANT_FLOW_LOW, HBM_DEGRADED, NVLINK_PORT_DOWN, SLOW_GPU
from rackscale.fleet import Topology
from rackscale.inputs import load_yaml_data, read_text
from rackscale.telemetry.dcgm import (
    ECC_DBE,
    NVLINK_CRC,
    POWER_VIOLATION,
    ROW_REMAP_FAILURE,
    THERMAL_VIOLATION,
    XID,
    GpuTelemetry,
    Page,
    TelemetryError,
)
from rackscale.telemetry.xid import classify

STAGE = "telemetry"  # the `stage` of every certify.finding telemetry records
HOT_RACK_SHARE = 0.5  # throttled share of a rack's GPUs that makes it the rack's cooling
MIN_RACK_GPUS = 2  # one GPU alone says nothing about its rack
# How sure each rule is (rackscale's choice, docs/figures.md): the exporter reports what the
# driver saw, so a hardware Xid or an ECC count is near certain; a rising CRC count or
# throttling is a symptom with other causes.
CONFIDENCE = {"xid": 0.9, "ecc": 0.95, "crc": 0.6, "throttle": 0.8}
Counters = dict[str, dict[str, float]]  # GPU index in the tray -> field -> value
Verdict = Literal["fail", "warn"]


class TelemetryEvidence(BaseModel):
    """The evidence of a telemetry finding (`certify.finding`'s `evidence`): where it was
    read, the field and value, and `key`, the identity a repeated scrape is matched on."""

    model_config = ConfigDict(extra="allow", frozen=True)
    exporter: Literal["dcgm-exporter"] = "dcgm-exporter"
    source: str
    field: str
    value: float
    key: str
    host: str | None = None
    gpu: int | None = None
    measured: Literal[True] = True


@dataclass(frozen=True, slots=True)
class TelemetryFinding:
    component: str
    kind: str
    verdict: Verdict
    confidence: float
    evidence: TelemetryEvidence

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "kind": self.kind, "verdict": self.verdict,
                "stage": STAGE, "confidence": self.confidence,
                "evidence": self.evidence.model_dump(exclude_none=True)}


@dataclass(slots=True)
class Evaluation:
    findings: list[TelemetryFinding] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    noted: list[dict[str, Any]] = field(default_factory=list)
    counters: dict[str, tuple[str, Counters]] = field(default_factory=dict)  # tray -> host, c.


@dataclass(frozen=True, slots=True)
class Context:
    """What a page is read against: the fleet, host -> tray, each tray's last recorded
    counters, and the racks under a coolant response now (rack -> what the lifecycle says)."""

    topo: Topology
    hosts: Mapping[str, str]
    baselines: Mapping[str, Counters]
    cooling: Mapping[str, Mapping[str, Any]]


def node_hosts(topo: Topology) -> dict[str, str]:
    """Slurm node name -> tray id for every tray and node of the fleet (dcgm-exporter's
    `Hostname` is the node's host name, which is its Slurm node name on a Slurm cluster)."""
    return topo.trays_by_slurm_node()


# dcgm-exporter's labels kept in a finding's evidence (a federation adds `instance`).
KEPT_LABELS = ("UUID", "pci_bus_id", "device", "modelName", "DCGM_FI_DRIVER_VERSION",
               "err_code", "err_msg", "instance")


def read_hosts(path: str, topo: Topology) -> dict[str, str]:
    """A `--hosts FILE`: a YAML (or JSON) mapping of exporter Hostname -> tray id or Slurm node
    name, e.g. `gpu-node-17: us-east/r03/c07`. Every value must name a tray of the fleet."""
    data = load_yaml_data(read_text(path, "--hosts file", error=TelemetryError), path,
                          error=TelemetryError)
    if not isinstance(data, dict) or not data:
        raise TelemetryError(f"--hosts {path}: write a mapping of exporter Hostname to tray "
                             "id, e.g. `gpu-node-17: us-east/r03/c07`")
    by_node = node_hosts(topo)
    trays = set(by_node.values())
    out: dict[str, str] = {}
    for host, where in data.items():
        tray = where if where in trays else by_node.get(str(where))
        if tray is None:
            raise TelemetryError(f"--hosts {path}: {host}: {where!r} is no tray or node of "
                                 f"fleet {topo.spec.name} (tray ids look like "
                                 f"{next(iter(sorted(trays)), 'region/r01/c01')})")
        out[str(host)] = tray
    return out


def _evidence(page: Page, g: GpuTelemetry, name: str, value: float, key: str,
              **extra: Any) -> TelemetryEvidence:
    labels = {k: g.labels[k] for k in KEPT_LABELS if k in g.labels}
    return TelemetryEvidence(source=page.source, host=g.host, gpu=g.gpu, field=name,
                             value=value, key=key, **labels, **extra)


def _point_findings(page: Page, g: GpuTelemetry, gpu_id: str, out: Evaluation) -> None:
    """Xid, ECC double-bit errors and row-remap failure: each read from this page alone."""
    code = int(g.values.get(XID, 0))
    if code > 0:
        x = classify(code)
        if x is None or x.kind is None:
            why = (f"application Xid {code} ({x.meaning}): the job's fault, not the GPU's"
                   if x is not None else f"Xid {code} is not in rackscale's classification "
                   "table (docs/figures.md): recorded nowhere")
            out.noted.append({"component": gpu_id, "xid": code, "why": why})
        else:
            out.findings.append(TelemetryFinding(
                gpu_id, x.kind, "fail", CONFIDENCE["xid"], _evidence(
                page, g, XID, code, f"xid:{code}", xid=code, xid_meaning=x.meaning,
                xid_class=x.cls)))
    dbe = g.values.get(ECC_DBE, 0.0)
    if dbe > 0:
        out.findings.append(TelemetryFinding(
            gpu_id, HBM_DEGRADED, "fail", CONFIDENCE["ecc"], _evidence(
            page, g, ECC_DBE, dbe, f"ecc_dbe:{dbe:g}")))
    if g.values.get(ROW_REMAP_FAILURE, 0.0) >= 1:
        out.findings.append(TelemetryFinding(
            gpu_id, HBM_DEGRADED, "fail", CONFIDENCE["ecc"], _evidence(
            page, g, ROW_REMAP_FAILURE, 1.0, "row_remap_failure")))


def _counters(g: GpuTelemetry) -> dict[str, float]:
    now = {f"L{k}": v for k, v in sorted(g.links.items())}
    for name in (THERMAL_VIOLATION, POWER_VIOLATION):
        if name in g.values:
            now[name] = g.values[name]
    crc = g.crc_total
    if crc is not None:
        now[NVLINK_CRC] = crc
    return now


def _rose(now: Mapping[str, float], before: Mapping[str, float] | None, name: str) -> float:
    """How much counter `name` rose since `before` (0: no earlier value, or it fell: the
    exporter or the driver restarted and counts from zero again)."""
    if before is None or name not in now or name not in before:
        return 0.0
    return max(0.0, now[name] - before[name])


def _crc_finding(page: Page, g: GpuTelemetry, gpu_id: str, now: Mapping[str, float],
                 before: Mapping[str, float] | None, out: Evaluation) -> None:
    rise = _rose(now, before, NVLINK_CRC)
    if rise <= 0 or before is None:
        return
    links = sorted(int(k[1:]) for k in now if k.startswith("L") and _rose(now, before, k) > 0)
    out.findings.append(TelemetryFinding(
        gpu_id, NVLINK_PORT_DOWN, "warn", CONFIDENCE["crc"], _evidence(
        page, g, NVLINK_CRC, now[NVLINK_CRC], f"nvlink_crc:{now[NVLINK_CRC]:g}",
        previous=before[NVLINK_CRC], rise=rise, links=links)))


def evaluate_page(page: Page, ctx: Context) -> Evaluation:
    """Findings, skips, notes and counters of one page (see the module's rules)."""
    out = Evaluation()
    topo = ctx.topo
    unknown: set[str] = set()
    throttled: dict[str, list[tuple[str, float, float]]] = {}  # rack -> (gpu, thermal, power)
    reporting: dict[str, int] = {}
    for what in page.unlabelled:
        out.skipped.append({"host": None, "gpu": None,
                            "why": f"{what}: no Hostname or gpu label to place it by"})
    for g in page.gpus:
        tray = ctx.hosts.get(g.host)
        if tray is None:
            if g.host not in unknown:
                unknown.add(g.host)
                out.skipped.append({"host": g.host, "gpu": None, "why": (
                    f"host {g.host!r} is no tray of fleet {topo.spec.name} (Slurm node names "
                    "are tray ids with '/' as '-'); map it with --hosts FILE")})
            continue
        gpus = topo.tray_gpus(tray)
        if g.gpu >= len(gpus):
            out.skipped.append({"host": g.host, "gpu": g.gpu, "why": (
                f"{tray} holds {len(gpus)} GPUs (gpu0..gpu{len(gpus) - 1}); the page "
                f"reports gpu {g.gpu}")})
            continue
        gpu_id = gpus[g.gpu]
        _point_findings(page, g, gpu_id, out)
        now = _counters(g)
        before = ctx.baselines.get(tray, {}).get(str(g.gpu))
        _crc_finding(page, g, gpu_id, now, before, out)
        rack = topo.gpu_place(gpu_id).rack
        if before is not None:
            reporting[rack] = reporting.get(rack, 0) + 1
            heat = _rose(now, before, THERMAL_VIOLATION)
            power = _rose(now, before, POWER_VIOLATION)
            if heat > 0 or power > 0:
                throttled.setdefault(rack, []).append((gpu_id, heat, power))
        out.counters.setdefault(tray, (g.host, {}))[1][str(g.gpu)] = now
    for rack, hot in throttled.items():
        _throttle_findings(page, ctx, rack, hot, reporting[rack], out)
    return out


def _throttle_findings(page: Page, ctx: Context, rack: str, hot: list[tuple[str, float, float]],
                       reporting: int, out: Evaluation) -> None:
    heat, power = sum(h for _, h, _ in hot), sum(p for _, _, p in hot)
    if reporting >= MIN_RACK_GPUS and len(hot) >= HOT_RACK_SHARE * reporting:
        response = ctx.cooling.get(rack)
        cdu = f"{rack}/cdu" if f"{rack}/cdu" in ctx.topo.index else rack
        ev = TelemetryEvidence(
            source=page.source, field=THERMAL_VIOLATION, value=heat,
            key=f"throttle:{heat:g}:{power:g}", gpus_throttled=len(hot),
            gpus_reporting=reporting, throttled=[g for g, _, _ in hot],
            thermal_violation_us=heat, power_violation_us=power,
            cdu_response=dict(response) if response is not None else None)
        # With the lifecycle's coolant response on the rack the throttling is explained (a
        # power cap throttles by design): noted, the response already acts.
        out.findings.append(TelemetryFinding(cdu, COOLANT_FLOW_LOW, "warn" if response else "fail",
                                    CONFIDENCE["throttle"], ev))
        return
    for gpu_id, h, p in hot:
        out.findings.append(TelemetryFinding(gpu_id, SLOW_GPU, "warn", CONFIDENCE["throttle"],
                                    TelemetryEvidence(
                                        source=page.source, field=THERMAL_VIOLATION, value=h,
                                        key=f"throttle:{h:g}:{p:g}", thermal_violation_us=h,
                                        power_violation_us=p,
                                        why=f"{len(hot)} of {reporting} reporting GPUs of "
                                            f"{rack} throttled: below the rack-wide share")))
