"""Fault kinds (DESIGN.md): what each one breaks and which component it sits on.

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


FAULT_KINDS: Registry[FaultKind] = Registry("fault kind", plural="kinds", error=UnknownFaultKind)
for _k in (
    FaultKind(name="slow_gpu", target_kinds=(GPU,), has_severity=True,
              detectable_below=0.95, description="GEMM throughput below nominal"),
    FaultKind(name="hbm_degraded", target_kinds=(GPU,), has_severity=True,
              detectable_below=0.95, description="HBM bandwidth below nominal"),
    FaultKind(name="gpu_dead", target_kinds=(GPU,), has_severity=False,
              description="GPU fell off the bus: every probe on it errors"),
    FaultKind(name="sdc", target_kinds=(GPU,), has_severity=False,
              description="silent data corruption: GEMM results are wrong"),
    FaultKind(name="nvlink_port_down", target_kinds=(GPU,), has_severity=False,
              description="one GPU loses one of its NVLink planes (8/9 of its bandwidth)"),
    FaultKind(name="nvlink_switch_down", target_kinds=(SWITCH_TRAY, NVSWITCH),
              has_severity=False,
              description="an NVLink switch tray is down; the domain reroutes over the rest"),
    FaultKind(name="nvlink_switch_degraded", target_kinds=(SWITCH_TRAY, NVSWITCH),
              has_severity=True, detectable_below=0.9,
              description="an NVLink switch tray runs slow; traffic striped over it waits"),
    FaultKind(name="bad_cable", target_kinds=(NIC,), has_severity=True,
              detectable_below=0.9, description="one NIC's scale-out link runs slow"),
    FaultKind(name="nic_dead", target_kinds=(NIC,), has_severity=False,
              description="one NIC carries no traffic"),
    FaultKind(name="leaf_degraded", target_kinds=(LEAF,), has_severity=True,
              detectable_below=0.9, description="a leaf switch forwards below line rate"),
    FaultKind(name="leaf_down", target_kinds=(LEAF,), has_severity=False,
              description="a leaf switch forwards nothing"),
    FaultKind(name="coolant_flow_low", target_kinds=(CDU,), has_severity=True,
              detectable_below=0.85,
              description="CDU flow below need: the whole rack heats up and throttles"),
    FaultKind(name="power_shelf_down", target_kinds=(POWER_SHELF,), has_severity=False,
              description="a power shelf delivers nothing (the rest carry the load)"),
    FaultKind(name="flapping", target_kinds=(), has_severity=False,
              description="another kind present only part of the time (duty)"),
):
    FAULT_KINDS.add(_k.name, _k)

FLAPPING = "flapping"


def get_kind(name: str) -> FaultKind:
    return FAULT_KINDS[name]
