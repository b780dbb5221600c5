"""Which lifecycle states count as "powered and cooled, in service" for the ledger.

The report reads the lifecycle room's states only through `lifecycle.transition` events (the
latest `to` of a component is its state, docs/contracts.md), so the state names are data here,
checked against what the events say: a state this table does not know is reported, never
silently counted.

A GPU counts when its rack serves jobs (the lifecycle room's `SERVING_RACK_STATES`:
production, degraded; a rack in bring-up, draining or out for repair takes no job, however
powered it is) and its tray (or HGX node) is in a tray state marked `powered` (or has no tray
state at all: a serving rack powers its trays). Trays in triage are powered but drained: the
healthy step drops them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rackscale.lifecycle import SERVING_RACK_STATES


@dataclass(frozen=True, slots=True)
class StateRule:
    powered: bool  # energised, coolant flow proven, in service
    meaning: str


_RACK_MEANING = {
    "received": "on the floor, not cabled",
    "cabled": "cabled, coolant not yet proven",
    "cooling_verified": "coolant flow proven, power still off",
    "powered": "powered on after the coolant interlock, not serving yet",
    "firmware": "firmware and switch OS being flashed",
    "burn_in": "burn-in running, waiting for certification",
    "certified": "certification passed, not serving yet",
    "production": "serving jobs",
    "degraded": "serving jobs with parts out",
    "draining": "cordoned: finishing jobs, taking no new ones",
    "maintenance": "out of service for maintenance",
    "isolated": "isolated by an interlock (leak, power, thermal)",
    "rma": "returned to the vendor",
    "retired": "decommissioned",
}
RACK_STATES: dict[str, StateRule] = {
    state: StateRule(state in {s.value for s in SERVING_RACK_STATES}, meaning)
    for state, meaning in _RACK_MEANING.items()}

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
