"""Lifecycle state machines: an Enum per machine plus the explicit transition table code enforces.

Racks follow NVIDIA's infra-controller shape (Created -> Discovering -> Maintenance ->
Validating -> Ready/Error) merged with CoreWeave's node lifecycle (Onboard -> Seatrial -> Zap ->
Test -> Production -> Triage -> RMA), see docs/figures.md. Trays (NVL72 compute trays, HGX nodes)
follow CoreWeave's node lifecycle.

The tables are the only authority: `check(kind, from, to)` raises `IllegalTransition` naming
the legal targets. Nothing else in rackscale decides whether a move is allowed.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from rackscale.errors import UserError
from rackscale.fleet import RackTemplate
from rackscale.state import BAD_TRAY_STATE_NAMES as _BAD
from rackscale.state import SERVING_RACK_STATE_NAMES as _SERVING


class RackState(StrEnum):
    RECEIVED = "received"
    CABLED = "cabled"
    COOLING_VERIFIED = "cooling_verified"
    POWERED = "powered"
    FIRMWARE = "firmware"
    BURN_IN = "burn_in"
    CERTIFIED = "certified"
    PRODUCTION = "production"
    DEGRADED = "degraded"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    ISOLATED = "isolated"
    RMA = "rma"
    RETIRED = "retired"


RACK_DOCS: dict[RackState, str] = {
    RackState.RECEIVED: "On the floor, inventoried; no power, no coolant.",
    RackState.CABLED: "Power, coolant and network cabled; valve open, flow not yet proven.",
    RackState.COOLING_VERIFIED: "CDU flow proven at or above the rack's need (1.43 L/min per "
                                "kW); power is still off. The only door to power.",
    RackState.POWERED: "All power shelves up, sequenced one at a time under the region budget.",
    RackState.FIRMWARE: "Firmware, switch OS and NVLink configuration applied (Zap).",
    RackState.BURN_IN: "Powered and under test; waiting for certification evidence.",
    RackState.CERTIFIED: "A passing certification is on record, newer than the last repair.",
    RackState.PRODUCTION: "Serving jobs; its trays are resumed in Slurm.",
    RackState.DEGRADED: "Serving jobs under a power cap or with some trays out (<= 2).",
    RackState.DRAINING: "Cordoned: no new jobs, running jobs finish; Slurm nodes drained.",
    RackState.MAINTENANCE: "Powered off for repair or after a coolant fault shed its load.",
    RackState.ISOLATED: "Valve closed and power off (severe or critical leak, or an "
                        "unresolved coolant fault).",
    RackState.RMA: "Returned to the vendor.",
    RackState.RETIRED: "Out of the fleet for good (terminal).",
}


class TrayState(StrEnum):
    ONBOARD = "onboard"
    SEATRIAL = "seatrial"
    BURN_IN = "burn_in"
    PRODUCTION = "production"
    TRIAGE = "triage"
    REPAIR = "repair"
    RMA = "rma"


TRAY_DOCS: dict[TrayState, str] = {
    TrayState.ONBOARD: "Known to the inventory; not yet powered.",
    TrayState.SEATRIAL: "Powered for the first time; BMC reachable, parts enumerated.",
    TrayState.BURN_IN: "Firmware applied and under test; waiting for certification evidence.",
    TrayState.PRODUCTION: "Serving jobs (needs a passing certification newer than its last "
                          "repair or triage).",
    TrayState.TRIAGE: "Pulled out of service by a finding, a leak or an operator; drained.",
    TrayState.REPAIR: "Being repaired (part swap, reseat); must re-certify to return.",
    TrayState.RMA: "Sent back; a replacement re-enters at onboard.",
}

for _s, _d in (*RACK_DOCS.items(), *TRAY_DOCS.items()):
    _s.__doc__ = _d

_R = RackState
# Every non-terminal rack state may be isolated (a critical leak closes the valve whatever the
# rack was doing) and the powered ones may drop to maintenance (a coolant fault sheds load).
RACK_TRANSITIONS: dict[RackState, frozenset[RackState]] = {
    _R.RECEIVED: frozenset({_R.CABLED, _R.RMA, _R.RETIRED}),
    _R.CABLED: frozenset({_R.COOLING_VERIFIED, _R.MAINTENANCE, _R.ISOLATED, _R.RMA}),
    _R.COOLING_VERIFIED: frozenset({_R.POWERED, _R.CABLED, _R.MAINTENANCE, _R.ISOLATED}),
    _R.POWERED: frozenset({_R.FIRMWARE, _R.MAINTENANCE, _R.ISOLATED}),
    _R.FIRMWARE: frozenset({_R.BURN_IN, _R.MAINTENANCE, _R.ISOLATED}),
    _R.BURN_IN: frozenset({_R.CERTIFIED, _R.MAINTENANCE, _R.ISOLATED}),
    # A rack certified (or back from a drain) with trays out serves degraded straight away: it
    # never shows production while a tray of it is in triage.
    _R.CERTIFIED: frozenset({_R.PRODUCTION, _R.DEGRADED, _R.BURN_IN, _R.MAINTENANCE,
                             _R.ISOLATED}),
    _R.PRODUCTION: frozenset({_R.DEGRADED, _R.DRAINING, _R.MAINTENANCE, _R.ISOLATED}),
    _R.DEGRADED: frozenset({_R.PRODUCTION, _R.DRAINING, _R.MAINTENANCE, _R.ISOLATED}),
    _R.DRAINING: frozenset({_R.PRODUCTION, _R.DEGRADED, _R.MAINTENANCE, _R.ISOLATED}),
    _R.MAINTENANCE: frozenset({_R.CABLED, _R.COOLING_VERIFIED, _R.ISOLATED, _R.RMA,
                               _R.RETIRED}),
    _R.ISOLATED: frozenset({_R.MAINTENANCE, _R.RMA, _R.RETIRED}),
    _R.RMA: frozenset({_R.RECEIVED, _R.RETIRED}),
    _R.RETIRED: frozenset(),
}

_T = TrayState
TRAY_TRANSITIONS: dict[TrayState, frozenset[TrayState]] = {
    _T.ONBOARD: frozenset({_T.SEATRIAL, _T.TRIAGE}),
    _T.SEATRIAL: frozenset({_T.BURN_IN, _T.TRIAGE}),
    _T.BURN_IN: frozenset({_T.PRODUCTION, _T.TRIAGE}),
    _T.PRODUCTION: frozenset({_T.TRIAGE}),
    # A tray cleared by re-certification goes back through burn_in or straight to production
    # (the production gate still demands a pass newer than the triage).
    _T.TRIAGE: frozenset({_T.REPAIR, _T.RMA, _T.BURN_IN, _T.PRODUCTION}),
    _T.REPAIR: frozenset({_T.BURN_IN, _T.RMA}),
    _T.RMA: frozenset({_T.ONBOARD}),
}

# Rack states in which the rack's power shelves are meant to be on.
POWERED_RACK_STATES = frozenset({_R.POWERED, _R.FIRMWARE, _R.BURN_IN, _R.CERTIFIED,
                                 _R.PRODUCTION, _R.DEGRADED, _R.DRAINING})
# Rack states in which its trays may serve jobs (be resumed in Slurm), and trays that count
# against a rack's "more than 2 bad trays" escalation: the fleet state's rule, as enums here.
SERVING_RACK_STATES = frozenset(_R(s) for s in _SERVING)
BAD_TRAY_STATES = frozenset(_T(s) for s in _BAD)
# The last transition into one of these makes older certification evidence stale.
RACK_REPAIR_STATES = frozenset({_R.MAINTENANCE, _R.RMA, _R.RECEIVED})
TRAY_REPAIR_STATES = frozenset({_T.TRIAGE, _T.REPAIR, _T.ONBOARD})

# The onboarding path the controller walks a rack along toward its goal.
ONBOARDING_PATH: tuple[RackState, ...] = (
    _R.RECEIVED, _R.CABLED, _R.COOLING_VERIFIED, _R.POWERED, _R.FIRMWARE, _R.BURN_IN,
)

RACK, TRAY = "rack", "tray"
# `lifecycle repair`: from each out-of-service state, the legal steps back onto the onboarding
# path (a rack to cabled: coolant check, power-on, firmware, burn-in; a tray to burn_in, or a
# replacement to onboard).
REPAIR_PATHS: dict[str, dict[str, tuple[str, ...]]] = {
    RACK: {_R.ISOLATED: (_R.MAINTENANCE, _R.CABLED), _R.MAINTENANCE: (_R.CABLED,),
           _R.RMA: (_R.RECEIVED,)},
    TRAY: {_T.TRIAGE: (_T.REPAIR, _T.BURN_IN), _T.REPAIR: (_T.BURN_IN,),
           _T.RMA: (_T.ONBOARD,)},
}
OUT_OF_SERVICE = {m: frozenset(paths) for m, paths in REPAIR_PATHS.items()}
MACHINES: dict[str, tuple[type[RackState] | type[TrayState], dict[Any, frozenset[Any]]]] = {
    RACK: (RackState, RACK_TRANSITIONS), TRAY: (TrayState, TRAY_TRANSITIONS)}


class IllegalTransition(UserError):
    pass


class UnknownState(UserError):
    pass


def parse_state(machine: str, value: str) -> RackState | TrayState:
    enum, _ = MACHINES[machine]
    try:
        return enum(value)
    except ValueError:
        raise UnknownState(
            f"unknown {machine} state {value!r}; valid {machine} states: "
            f"{', '.join(s.value for s in enum)}"
        ) from None


def legal_targets(machine: str, state: str) -> list[str]:
    enum, table = MACHINES[machine]
    return sorted(s.value for s in table[enum(state)])


def check(machine: str, cid: str, src: str, dst: str) -> None:
    """Raise IllegalTransition unless the table allows src -> dst."""
    enum, table = MACHINES[machine]
    target = parse_state(machine, dst)
    if target not in table[enum(src)]:
        legal = legal_targets(machine, src)
        back = (f"; to return it to service after a repair: `rackscale lifecycle repair "
                f"{cid} --reason TEXT`" if src in OUT_OF_SERVICE[machine] else "")
        raise IllegalTransition(
            f"illegal transition for {machine} {cid}: {src} -> {dst}; from {src} the legal "
            f"targets are: {', '.join(legal) if legal else 'none (terminal state)'}{back}"
        )


def serving_target(template: RackTemplate, bad: int) -> RackState | None:
    """The state a rack allowed to serve takes with `bad` trays (or nodes) out: production with
    none, degraded with some, None when its template cordons it for that many (an NVL72 rack
    with more than its tolerated trays out: one NVLink domain, so the rack is repaired)."""
    if bad <= 0:
        return RackState.PRODUCTION
    if bad <= template.max_bad_trays or not template.cordon_on_bad_trays:
        return RackState.DEGRADED
    return None


def trays_out(template: RackTemplate, bad: int) -> str:
    """`bad` out-of-service parts of a rack in its kind's words ("2 trays out (<= 2 tolerated
    by jobs on its NVLink domain)", "1 node out" for HGX, whose nodes are their own domains)."""
    if template.domain_is_rack:
        return (f"{bad} tray{'s' if bad != 1 else ''} out (<= {template.max_bad_trays} "
                "tolerated by jobs on its NVLink domain)")
    return f"{bad} node{'s' if bad != 1 else ''} out (each node is its own NVLink domain)"
