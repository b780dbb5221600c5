"""Interlocks: the safety rules no transition or command may break, as pure functions.

- Power-on needs verified coolant flow at the rack's CDU at or above the rack's need
  (LPM_PER_KW x rack kW, docs/figures.md), the valve open, the inlet inside W45, and no leak.
- A coolant fault gets a tiered response, each step with its own deadline measured from the
  fault's first observation: warn -> power cap -> drain jobs -> power off -> isolate (valve).
- Leak tiers (NVIDIA NICo, docs/figures.md): 1-2 leaking trays shut those trays; more than 2 isolate
  the rack; a critical leak closes the valve at once.
- Power sequencing never exceeds a region's power budget (RegionSpec.power_budget_kw).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, StrEnum

from rackscale.errors import UserError
from rackscale.lifecycle.drivers import DEFAULT_MAX_INLET_C, CduTelemetry


class InterlockRefused(UserError):
    pass


class CoolantTier(IntEnum):
    """How far the response to a coolant fault has gone on a rack or tray (not a checkpoint
    tier): each step is due a set time after the fault is first seen (FaultPolicy)."""

    NONE = 0
    WARN = 1
    CAP = 2
    DRAIN = 3
    OFF = 4
    ISOLATE = 5


# The response to a coolant fault, in the order its steps come due.
RESPONSE_STEPS = (CoolantTier.WARN, CoolantTier.CAP, CoolantTier.DRAIN, CoolantTier.OFF,
                  CoolantTier.ISOLATE)


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPolicy:
    """When each step of the coolant-fault response is due, seconds after the fault is first
    seen. A step's deadline is its due time plus one controller period (the loop's promise)."""

    warn_s: float = 0.0
    cap_s: float = 5.0
    drain_s: float = 15.0
    off_s: float = 30.0
    isolate_s: float = 90.0
    cap_fraction: float = 0.6
    max_inlet_c: float = DEFAULT_MAX_INLET_C
    period_s: float = 5.0

    def __post_init__(self) -> None:
        due = [self.warn_s, self.cap_s, self.drain_s, self.off_s, self.isolate_s]
        if any(d < 0 for d in due) or due != sorted(due):
            raise ValueError(
                "FaultPolicy: step times must be >= 0 and in order warn <= cap <= drain <= off "
                f"<= isolate; got {due}"
            )
        if not 0 < self.cap_fraction < 1:
            raise ValueError(f"FaultPolicy.cap_fraction must be in (0, 1); got {self.cap_fraction}")
        if self.period_s <= 0:
            raise ValueError(f"FaultPolicy.period_s must be > 0; got {self.period_s}")

    def due(self, tier: CoolantTier) -> float:
        return {CoolantTier.WARN: self.warn_s, CoolantTier.CAP: self.cap_s,
                CoolantTier.DRAIN: self.drain_s, CoolantTier.OFF: self.off_s,
                CoolantTier.ISOLATE: self.isolate_s}[tier]

    def deadline(self, tier: CoolantTier) -> float:
        return self.due(tier) + self.period_s


def flow_ok(r: CduTelemetry, required_lpm: float, max_inlet_c: float) -> str | None:
    """None when the rack may be powered, else why not (the power-on interlock)."""
    if not r.valve_open:
        return "CDU valve closed"
    if r.critical_leak or r.leaking_trays:
        return f"leak at {', '.join(sorted(r.leaking_trays)) or 'CDU'}"
    if r.flow_lpm < required_lpm:
        return f"coolant flow {r.flow_lpm:.0f} L/min < required {required_lpm:.0f} L/min"
    if r.inlet_c > max_inlet_c:
        return f"inlet {r.inlet_c:.1f} C > {max_inlet_c:.0f} C (W45)"
    return None


def coolant_fault(r: CduTelemetry, required_lpm: float, max_inlet_c: float) -> str | None:
    """A flow or temperature fault (leaks are handled by their own tiers)."""
    if r.valve_open and r.flow_lpm < required_lpm:
        return f"flow_low: {r.flow_lpm:.0f} L/min < {required_lpm:.0f} L/min"
    if r.inlet_c > max_inlet_c:
        return f"inlet_high: {r.inlet_c:.1f} C > {max_inlet_c:.0f} C"
    return None


class LeakTier(StrEnum):
    """How bad a rack's coolant leak is, and so what the interlock does."""

    CRITICAL = "critical"
    """The CDU reports a critical leak: close the valve, isolate the rack."""
    SEVERE = "severe"
    """More than SEVERE_LEAK_TRAYS trays leak: isolate the rack."""
    GENERAL = "general"
    """One or a few trays leak: shut those trays down."""


SEVERE_LEAK_TRAYS = 2  # more leaking trays than this isolate the whole rack


def leak_tier(r: CduTelemetry) -> LeakTier | None:
    if r.critical_leak:
        return LeakTier.CRITICAL
    if len(r.leaking_trays) > SEVERE_LEAK_TRAYS:
        return LeakTier.SEVERE
    if r.leaking_trays:
        return LeakTier.GENERAL
    return None
