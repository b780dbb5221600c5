"""Which lifecycle states count as "powered and cooled, in service" for the ledger.

The report reads the lifecycle room's states only through `lifecycle.transition` events (the
latest `to` of a component is its state, docs/contracts.md), so the state names are data here,
checked against what the events say: a state this table does not know is reported, never
silently counted.

A GPU is powered and cooled when its rack is in a rack state marked `powered` below and its
tray (or HGX node) is in a tray state marked `powered` (or has no tray state at all: a rack
that is powered powers its trays). These match the lifecycle room's own tables
(`POWERED_RACK_STATES`; tray docs: onboard is "not yet powered"); maintenance racks are
powered off for repair. Trays in triage are powered but drained: the healthy step drops them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StateRule:
    powered: bool  # energised, coolant flow proven, in service
    meaning: str


RACK_STATES: dict[str, StateRule] = {
    "received": StateRule(False, "on the floor, not cabled"),
    "cabled": StateRule(False, "cabled, coolant not yet proven"),
    "cooling_verified": StateRule(False, "coolant flow proven, power still off"),
    "powered": StateRule(True, "powered on after the coolant interlock"),
    "firmware": StateRule(True, "firmware and switch OS being flashed"),
    "burn_in": StateRule(True, "burn-in running"),
    "certified": StateRule(True, "certification ladder passed"),
    "production": StateRule(True, "serving jobs"),
    "degraded": StateRule(True, "serving jobs with parts out"),
    "draining": StateRule(True, "finishing jobs before maintenance"),
    "maintenance": StateRule(False, "out of service for maintenance"),
    "isolated": StateRule(False, "isolated by an interlock (leak, power, thermal)"),
    "rma": StateRule(False, "returned to the vendor"),
    "retired": StateRule(False, "decommissioned"),
}

TRAY_STATES: dict[str, StateRule] = {
    "onboard": StateRule(False, "known to the inventory, not yet powered"),
    "seatrial": StateRule(True, "first power-on trial"),
    "burn_in": StateRule(True, "burn-in running"),
    "production": StateRule(True, "serving jobs"),
    "triage": StateRule(True, "pulled from jobs for diagnosis (powered)"),
    "repair": StateRule(False, "out for repair"),
    "rma": StateRule(False, "returned to the vendor"),
}

# Tray states that keep a tray's GPUs out of the healthy set even without a finding of the
# latest certification run (the lifecycle room put them there for a reason of its own).
TRAY_OUT_OF_SERVICE = frozenset({"triage"})


def rack_powered(state: str) -> bool | None:
    """True/False for a known rack state; None for one this table does not know."""
    rule = RACK_STATES.get(state)
    return None if rule is None else rule.powered


def tray_powered(state: str) -> bool | None:
    rule = TRAY_STATES.get(state)
    return None if rule is None else rule.powered
