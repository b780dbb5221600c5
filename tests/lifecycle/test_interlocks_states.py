"""The safety rules and transition tables themselves (lifecycle/interlocks.py, states.py), each
on and around its line. The controller tests (test_lifecycle_property.py and the twin tests)
show the same rules holding while racks move."""

from __future__ import annotations

import itertools

import pytest

from rackscale.fleet import CduReading
from rackscale.lifecycle.interlocks import (
    CoolantTier,
    FaultPolicy,
    coolant_fault,
    flow_ok,
    leak_tier,
)
from rackscale.lifecycle.states import (
    RACK,
    RACK_TRANSITIONS,
    TRAY,
    TRAY_TRANSITIONS,
    IllegalTransition,
    RackState,
    TrayState,
    UnknownState,
    check,
    legal_targets,
    parse_state,
)


def cdu(flow=200.0, inlet=30.0, valve=True, trays=(), critical=False) -> CduReading:
    return CduReading(rack="us-east/r01", flow_lpm=flow, inlet_c=inlet, valve_open=valve,
                      leaking_trays=frozenset(trays), critical_leak=critical)


# --- the coolant-fault response ----------------------------------------------------------------

def test_tiers_escalate_in_order_and_are_distinct():
    assert [t.name for t in sorted(CoolantTier)] == ["NONE", "WARN", "CAP", "DRAIN", "OFF",
                                                     "ISOLATE"]
    # The lifecycle table stores a rack's fault tier as this integer: the values are a format.
    assert [int(t) for t in sorted(CoolantTier)] == [0, 1, 2, 3, 4, 5]
    assert CoolantTier.NONE == 0
    assert max(CoolantTier.WARN, CoolantTier.ISOLATE) is CoolantTier.ISOLATE


def test_fault_policy_due_times_and_deadlines():
    p = FaultPolicy()
    assert [p.due(t) for t in list(CoolantTier)[1:]] == [0.0, 5.0, 15.0, 30.0, 90.0]
    assert [p.deadline(t) for t in list(CoolantTier)[1:]] == [5.0, 10.0, 20.0, 35.0, 95.0]
    assert (p.cap_fraction, p.max_inlet_c, p.period_s) == (0.6, 45.0, 5.0)
    custom = FaultPolicy(warn_s=1, cap_s=2, drain_s=3, off_s=4, isolate_s=6, period_s=0.5)
    assert [custom.deadline(t) for t in list(CoolantTier)[1:]] == [1.5, 2.5, 3.5, 4.5, 6.5]


def test_fault_policy_is_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        FaultPolicy(0.0, 5.0)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        FaultPolicy().cap_s = 1.0  # type: ignore[misc]


def test_fault_policy_accepts_equal_step_times_and_zero():
    p = FaultPolicy(warn_s=0, cap_s=0, drain_s=0, off_s=0, isolate_s=0)
    assert p.deadline(CoolantTier.ISOLATE) == 5.0


@pytest.mark.parametrize("kw", [{"warn_s": -1.0}, {"cap_s": 20.0}, {"isolate_s": 29.0},
                                {"off_s": 14.0}, {"drain_s": 4.0}])
def test_fault_policy_refuses_negative_or_out_of_order_steps(kw):
    with pytest.raises(ValueError, match=r"step times must be >= 0 and in order .*got \["):
        FaultPolicy(**kw)


@pytest.mark.parametrize("frac", [0.0, 1.0, -0.5, 1.5])
def test_fault_policy_cap_fraction_lies_strictly_between_zero_and_one(frac):
    with pytest.raises(ValueError, match=rf"cap_fraction must be in \(0, 1\); got {frac}"):
        FaultPolicy(cap_fraction=frac)
    assert FaultPolicy(cap_fraction=0.01).cap_fraction == 0.01
    assert FaultPolicy(cap_fraction=0.99).cap_fraction == 0.99


@pytest.mark.parametrize("period", [0.0, -5.0])
def test_fault_policy_period_must_be_positive(period):
    with pytest.raises(ValueError, match=rf"period_s must be > 0; got {period}"):
        FaultPolicy(period_s=period)


# --- power-on interlock ------------------------------------------------------------------------

def test_flow_ok_allows_power_exactly_at_the_need_and_the_inlet_limit():
    assert flow_ok(cdu(flow=100.0, inlet=45.0), 100.0, 45.0) is None
    assert flow_ok(cdu(flow=150.0, inlet=20.0), 100.0, 45.0) is None  # cooler is fine


def test_flow_ok_names_each_reason_power_is_refused():
    assert flow_ok(cdu(valve=False), 100.0, 45.0) == "CDU valve closed"
    assert flow_ok(cdu(trays=["c07", "c02"]), 100.0, 45.0) == "leak at c02, c07"
    assert flow_ok(cdu(critical=True), 100.0, 45.0) == "leak at CDU"
    assert flow_ok(cdu(flow=99.6), 100.0, 45.0) == \
        "coolant flow 100 L/min < required 100 L/min"
    assert flow_ok(cdu(flow=80.2), 103.4, 45.0) == "coolant flow 80 L/min < required 103 L/min"
    assert flow_ok(cdu(inlet=45.04), 100.0, 45.0) == "inlet 45.0 C > 45 C (W45)"
    assert flow_ok(cdu(inlet=50.0), 100.0, 40.0) == "inlet 50.0 C > 40 C (W45)"


def test_flow_ok_checks_the_valve_first_then_leaks_then_flow_then_inlet():
    assert flow_ok(cdu(valve=False, trays=["c01"], flow=0, inlet=90), 100, 45) == \
        "CDU valve closed"
    assert flow_ok(cdu(trays=["c01"], flow=0, inlet=90), 100, 45) == "leak at c01"
    assert flow_ok(cdu(flow=0, inlet=90), 100, 45).startswith("coolant flow 0 L/min")


# --- coolant faults and leak tiers -------------------------------------------------------------

def test_coolant_fault_flow_low_only_with_the_valve_open():
    assert coolant_fault(cdu(flow=50.4), 100.0, 45.0) == "flow_low: 50 L/min < 100 L/min"
    assert coolant_fault(cdu(flow=50.0, valve=False), 100.0, 45.0) is None
    assert coolant_fault(cdu(flow=100.0), 100.0, 45.0) is None


def test_coolant_fault_inlet_high_above_the_limit_only():
    assert coolant_fault(cdu(inlet=46.25), 100.0, 45.0) == "inlet_high: 46.2 C > 45 C"
    assert coolant_fault(cdu(inlet=45.0), 100.0, 45.0) is None
    assert coolant_fault(cdu(inlet=46.0, valve=False), 100.0, 45.0) == \
        "inlet_high: 46.0 C > 45 C"
    assert coolant_fault(cdu(flow=10.0, inlet=60.0), 100.0, 45.0).startswith("flow_low")


def test_coolant_fault_ignores_leaks():
    assert coolant_fault(cdu(trays=["c01", "c02", "c03"], critical=True), 100.0, 45.0) is None


@pytest.mark.parametrize(("trays", "critical", "tier"), [
    ((), False, None), (("c01",), False, "general"), (("c01", "c02"), False, "general"),
    (("c01", "c02", "c03"), False, "severe"), ((), True, "critical"),
    (("c01", "c02", "c03"), True, "critical"),
])
def test_leak_tiers(trays, critical, tier):
    assert leak_tier(cdu(trays=trays, critical=critical)) == tier


# --- transition tables -------------------------------------------------------------------------

def test_power_is_reachable_only_from_proven_cooling():
    into_powered = [s for s, targets in RACK_TRANSITIONS.items() if RackState.POWERED in targets]
    assert into_powered == [RackState.COOLING_VERIFIED]
    with pytest.raises(IllegalTransition):
        check(RACK, "us-east/r01", "cabled", "powered")
    check(RACK, "us-east/r01", "cooling_verified", "powered")


def test_every_table_covers_every_state_and_names_only_its_own_states():
    assert set(RACK_TRANSITIONS) == set(RackState)
    assert set(TRAY_TRANSITIONS) == set(TrayState)
    assert all(t in RackState for ts in RACK_TRANSITIONS.values() for t in ts)
    assert all(t in TrayState for ts in TRAY_TRANSITIONS.values() for t in ts)


def test_check_allows_exactly_the_table():
    for machine, enum, table in ((RACK, RackState, RACK_TRANSITIONS),
                                 (TRAY, TrayState, TRAY_TRANSITIONS)):
        for src, dst in itertools.product(enum, enum):
            if dst in table[src]:
                check(machine, "x", src.value, dst.value)
            else:
                with pytest.raises(IllegalTransition):
                    check(machine, "x", src.value, dst.value)


def test_illegal_transition_names_the_legal_targets_sorted():
    with pytest.raises(IllegalTransition) as e:
        check(TRAY, "us-east/r01/c07", "production", "repair")
    assert str(e.value) == ("illegal transition for tray us-east/r01/c07: production -> repair; "
                            "from production the legal targets are: triage")
    with pytest.raises(IllegalTransition) as e:
        check(RACK, "us-east/r01", "received", "powered")
    assert str(e.value).endswith("from received the legal targets are: cabled, retired, rma")


def test_terminal_state_says_so():
    with pytest.raises(IllegalTransition, match=r"legal targets are: none \(terminal state\)$"):
        check(RACK, "us-east/r01", "retired", "received")
    assert legal_targets(RACK, "retired") == []


def test_legal_targets_are_sorted_values():
    assert legal_targets(TRAY, "triage") == ["burn_in", "production", "repair", "rma"]
    assert legal_targets(RACK, "draining") == ["degraded", "isolated", "maintenance",
                                               "production"]


def test_unknown_state_lists_the_valid_ones():
    assert parse_state(TRAY, "rma") is TrayState.RMA
    assert parse_state(RACK, "rma") is RackState.RMA
    with pytest.raises(UnknownState) as e:
        parse_state(TRAY, "broken")
    assert str(e.value) == ("unknown tray state 'broken'; valid tray states: onboard, seatrial, "
                            "burn_in, production, triage, repair, rma")
    with pytest.raises(UnknownState, match="unknown rack state 'nope'"):
        check(RACK, "us-east/r01", "received", "nope")


def test_every_state_carries_its_docstring():
    assert all(s.__doc__ and s.__doc__ != RackState.__doc__ for s in RackState)
    assert TrayState.TRIAGE.__doc__.startswith("Pulled out of service")


def test_a_serving_rack_with_trays_out_is_degraded_and_an_nvl72_past_its_limit_cordoned():
    from rackscale.fleet.templates import TEMPLATES
    from rackscale.lifecycle.states import serving_target, trays_out

    nvl, hgx = TEMPLATES["vr-nvl72"], next(t for t in TEMPLATES.values()
                                           if not t.domain_is_rack)
    limit = nvl.max_bad_trays
    assert serving_target(nvl, 0) == RackState.PRODUCTION
    assert serving_target(nvl, 1) == RackState.DEGRADED
    assert serving_target(nvl, limit) == RackState.DEGRADED
    assert serving_target(nvl, limit + 1) is None  # one NVLink domain: cordoned
    assert serving_target(hgx, 0) == RackState.PRODUCTION
    assert serving_target(hgx, hgx.max_bad_trays + 5) == RackState.DEGRADED  # never cordoned
    assert trays_out(nvl, 1) == f"1 tray out (<= {limit} tolerated by jobs on its NVLink domain)"
    assert trays_out(nvl, 2).startswith("2 trays out")
    assert "NVL72" not in trays_out(hgx, 2) and trays_out(hgx, 2).startswith("2 nodes out")
    assert trays_out(hgx, 1).startswith("1 node out")
    assert trays_out(nvl, 0).startswith("0 trays out") and trays_out(hgx, 0).startswith("0 nodes")
