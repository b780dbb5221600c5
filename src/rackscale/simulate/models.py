"""Failure models: how often the GPUs of a job fail, why, and what each cause takes out.

A failure model is a rate per GPU-hour and a table of causes. Each cause names a fault kind of
docs/architecture.md (`gpu_dead`, `hbm_degraded`, `sdc`, `bad_cable`, ...; `software`, `host` for
causes that are no hardware fault of the twin), the scope it takes out (`none`: restart only;
`tray`: the tray/node goes to repair; `domain`: the whole NVLink domain does), a repair time
and a detection latency. The mapping from a published cause to a fault kind is data (CAUSES
below), so the faults room and the simulator agree on names without importing each other.

Failures are memoryless (Poisson in wall time) in every model here: the published figures are
counts over a period, which say nothing about the shape of the inter-arrival distribution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rackscale.registry import Registry, UnknownName

Scope = Literal["none", "tray", "domain"]
SCOPES: tuple[Scope, ...] = ("none", "tray", "domain")


class UnknownFailureModel(UnknownName):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    name: str  # the published label (Llama 3 Table 5)
    count: int  # unexpected interruptions with this cause in the source period
    kind: str  # a fault kind (docs/architecture.md), or "software"/"host" for non-twin causes
    scope: Scope
    # Hours until the part is back in service (assumptions, not published figures: a tray swap
    # from stock, a GPU RMA, a cable reseat). Only matters when spares run out.
    repair_h: float
    # Minutes from the fault to the job knowing it (assumptions: a crash is seen at once by the
    # launcher; a hang waits for the NCCL watchdog; silent data corruption is found late).
    detect_min: float


# Llama 3 405B, 16,384 H100 x 54 days, 419 unexpected interruptions (arXiv 2407.21783,
# sec. 3.3.4, Table 5 counts as listed in docs/figures.md; sum 419).
LLAMA3_GPUS = 16_384
LLAMA3_DAYS = 54
CAUSES: tuple[Cause, ...] = (
    Cause(name="faulty GPU", count=148, kind="gpu_dead", scope="tray", repair_h=24, detect_min=2),
    Cause(name="GPU HBM3 memory", count=72, kind="hbm_degraded", scope="tray", repair_h=24,
          detect_min=2),
    Cause(name="software bug", count=54, kind="software", scope="none", repair_h=0,
          detect_min=2),
    Cause(name="network switch/cable", count=35, kind="bad_cable", scope="tray", repair_h=4,
          detect_min=10),
    Cause(name="host maintenance", count=32, kind="host", scope="tray", repair_h=8,
          detect_min=2),
    Cause(name="GPU SRAM memory", count=19, kind="gpu_dead", scope="tray", repair_h=24,
          detect_min=2),
    Cause(name="GPU system processor", count=17, kind="gpu_dead", scope="tray", repair_h=24,
          detect_min=2),
    Cause(name="NIC", count=7, kind="nic_dead", scope="tray", repair_h=8, detect_min=10),
    Cause(name="NCCL watchdog timeouts", count=7, kind="software", scope="none", repair_h=0,
          detect_min=10),
    Cause(name="silent data corruption", count=6, kind="sdc", scope="tray", repair_h=24,
          detect_min=60),
    Cause(name="GPU thermal interface + sensor", count=6, kind="gpu_dead", scope="tray",
          repair_h=24, detect_min=2),
    Cause(name="SSD", count=3, kind="host", scope="tray", repair_h=8, detect_min=2),
    # A power shelf feeds the whole NVLink domain (the node on HGX, the rack on NVL72).
    Cause(name="power supply", count=3, kind="power_shelf_down", scope="domain", repair_h=8,
          detect_min=2),
    Cause(name="server chassis", count=2, kind="host", scope="tray", repair_h=24, detect_min=2),
    Cause(name="IO expansion board", count=2, kind="host", scope="tray", repair_h=24,
          detect_min=2),
    Cause(name="dependency", count=2, kind="software", scope="none", repair_h=0, detect_min=2),
    Cause(name="CPU", count=2, kind="host", scope="tray", repair_h=24, detect_min=2),
    Cause(name="system memory", count=2, kind="host", scope="tray", repair_h=8, detect_min=2),
)
LLAMA3_UNEXPECTED = sum(c.count for c in CAUSES)  # 419

# A fail-slow GPU found by straggler detection: the simulator's own cause, not in Table 5.
STRAGGLER = Cause(name="straggler (fail-slow)", count=0, kind="slow_gpu", scope="tray",
                  repair_h=24, detect_min=0)


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureModel:
    name: str
    rate_per_gpu_h: float  # fail-stop interruptions per GPU-hour
    causes: tuple[Cause, ...]
    source: str

    @property
    def shares(self) -> list[float]:
        total = sum(c.count for c in self.causes)
        return [c.count / total for c in self.causes]


FAILURE_MODELS: Registry[Callable[[], FailureModel]] = Registry(
    "failure model", error=UnknownFailureModel, sort_names=True)
# Kept as a name of its own: `@register("name")` on a function returning a FailureModel.
register = FAILURE_MODELS.register


def failure_model(name: str) -> FailureModel:
    return FAILURE_MODELS[name]()


@register("llama3")
def _llama3() -> FailureModel:
    return FailureModel(
        name="llama3",
        rate_per_gpu_h=LLAMA3_UNEXPECTED / (LLAMA3_GPUS * LLAMA3_DAYS * 24),
        causes=CAUSES,
        source="Llama 3 405B Table 5: 419 unexpected interruptions / (16,384 GPUs x 54 days)",
    )


def _rsc(name: str, per_1000_node_days: float) -> FailureModel:
    # r_f is per 8-GPU node-day; RSC gives no cause split (docs/figures.md), so Llama 3's is used.
    return FailureModel(
        name=name,
        rate_per_gpu_h=per_1000_node_days / 1000 / 8 / 24,
        causes=CAUSES,
        source=f"Meta {name.upper()} r_f = {per_1000_node_days} per 1,000 node-days (Kokolis "
               "et al., HPCA 2025); cause split from Llama 3 Table 5",
    )


@register("rsc-1")
def _rsc1() -> FailureModel:
    return _rsc("rsc-1", 6.50)


@register("rsc-2")
def _rsc2() -> FailureModel:
    return _rsc("rsc-2", 2.34)
