"""Fault kinds (docs/formats.md): what each one breaks and which component it sits on.

A kind is data, not a class: the digital twin reads `target_kinds` to place it and the
localizer names findings with the same words. `severity` is the fraction of nominal that
remains (0 = dead); on/off kinds have none. `detectable_below` is the largest severity the
ladder is built to catch at the twin's ~1% noise (tests draw severities under it).
"""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.fleet import CDU, GPU, LEAF, NIC, NVSWITCH, POWER_SHELF, SWITCH_TRAY
from rackscale.registry import Registry, UnknownName


class UnknownFaultKind(UnknownName):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultKind:
    name: str
    target_kinds: tuple[str, ...]
    has_severity: bool
    description: str
    detectable_below: float = 1.0


FLAPPING = "flapping"
# The kinds by name, for code that names a finding (the ladder's stages) or applies a fault.
SLOW_GPU, HBM_DEGRADED, GPU_DEAD, SDC = "slow_gpu", "hbm_degraded", "gpu_dead", "sdc"
NVLINK_PORT_DOWN = "nvlink_port_down"
NVLINK_SWITCH_DOWN, NVLINK_SWITCH_DEGRADED = "nvlink_switch_down", "nvlink_switch_degraded"
BAD_CABLE, NIC_DEAD = "bad_cable", "nic_dead"
LEAF_DEGRADED, LEAF_DOWN = "leaf_degraded", "leaf_down"
COOLANT_FLOW_LOW, POWER_SHELF_DOWN = "coolant_flow_low", "power_shelf_down"

FAULT_KINDS: Registry[FaultKind] = Registry("fault kind", plural="kinds", error=UnknownFaultKind)
for _k in (
    FaultKind(name=SLOW_GPU, target_kinds=(GPU,), has_severity=True,
              detectable_below=0.95, description="GEMM throughput below nominal"),
    FaultKind(name=HBM_DEGRADED, target_kinds=(GPU,), has_severity=True,
              detectable_below=0.95, description="HBM bandwidth below nominal"),
    FaultKind(name=GPU_DEAD, target_kinds=(GPU,), has_severity=False,
              description="GPU fell off the bus: every probe on it errors"),
    FaultKind(name=SDC, target_kinds=(GPU,), has_severity=False,
              description="silent data corruption: GEMM results are wrong"),
    FaultKind(name=NVLINK_PORT_DOWN, target_kinds=(GPU,), has_severity=False,
              description="one GPU loses one of its NVLink planes (8/9 of its bandwidth)"),
    FaultKind(name=NVLINK_SWITCH_DOWN, target_kinds=(SWITCH_TRAY, NVSWITCH),
              has_severity=False,
              description="an NVLink switch tray is down; the domain reroutes over the rest"),
    FaultKind(name=NVLINK_SWITCH_DEGRADED, target_kinds=(SWITCH_TRAY, NVSWITCH),
              has_severity=True, detectable_below=0.9,
              description="an NVLink switch tray runs slow; traffic striped over it waits"),
    FaultKind(name=BAD_CABLE, target_kinds=(NIC,), has_severity=True,
              detectable_below=0.9, description="one NIC's scale-out link runs slow"),
    FaultKind(name=NIC_DEAD, target_kinds=(NIC,), has_severity=False,
              description="one NIC carries no traffic"),
    FaultKind(name=LEAF_DEGRADED, target_kinds=(LEAF,), has_severity=True,
              detectable_below=0.9, description="a leaf switch forwards below line rate"),
    FaultKind(name=LEAF_DOWN, target_kinds=(LEAF,), has_severity=False,
              description="a leaf switch forwards nothing"),
    FaultKind(name=COOLANT_FLOW_LOW, target_kinds=(CDU,), has_severity=True,
              detectable_below=0.85,
              description="CDU flow below need: the whole rack heats up and throttles"),
    FaultKind(name=POWER_SHELF_DOWN, target_kinds=(POWER_SHELF,), has_severity=False,
              description="a power shelf delivers nothing (the rest carry the load)"),
    FaultKind(name=FLAPPING, target_kinds=(), has_severity=False,
              description="another kind present only part of the time (duty)"),
):
    FAULT_KINDS.add(_k.name, _k)



def get_kind(name: str) -> FaultKind:
    return FAULT_KINDS[name]
