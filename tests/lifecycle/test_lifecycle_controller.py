"""Controller behaviour on the simulated plant and clock: sequencing under the budget,
tiered coolant-fault response with deadlines, leak tiers, escalation, idempotence."""

from __future__ import annotations

import pytest
from lc_rig import Rig

from rackscale.errors import UserError
from rackscale.lifecycle import (
    RACK_TRANSITIONS,
    TRAY_TRANSITIONS,
    CoolantTier,
    EvidenceMissing,
    FaultPolicy,
    IllegalTransition,
    RackState,
    TrayState,
    set_goal,
    state_of,
    transition,
)


def _onboard(rig: Rig, goal: str = "burn_in") -> None:
    set_goal(rig.store, list(rig.ctl.targets), goal)
    rig.ctl.run(until_idle=True, max_passes=200)


def test_every_state_documented_and_tables_closed() -> None:
    for enum, table in ((RackState, RACK_TRANSITIONS), (TrayState, TRAY_TRANSITIONS)):
        assert set(table) == set(enum)
        for s in enum:
            assert s.__doc__ and len(s.__doc__) > 10
            assert all(t in enum for t in table[s])


def test_illegal_transition_names_legal_targets(rig: Rig) -> None:
    with pytest.raises(IllegalTransition, match="legal targets are: cabled, retired, rma"):
        transition(rig.store, "a/r01", "production", actor="t", reason="x")
    with pytest.raises(UserError, match="needs a reason"):
        transition(rig.store, "a/r01", "cabled", actor="t", reason=" ")


def test_onboarding_sequences_shelves_under_region_budget(rig: Rig) -> None:
    _onboard(rig)
    # Region a: 400 kW budget, 190 kW racks of 8 x 23.75 kW shelves -> 16 shelves fit.
    states = {r: state_of(rig.store, r).state for r in rig.ctl.targets}
    assert states["b/r01"] == "burn_in"
    assert sorted(states[r] for r in ("a/r01", "a/r02", "a/r03")) == [
        "burn_in", "burn_in", "cooling_verified"]
    on = [c.target for c in rig.plant.log if c.action == "on" and "/ps" in c.target]
    region_a = sum(1 for t in rig.plant.power if t.startswith("a/") and "/ps" in t
                   and rig.plant.power[t])
    assert region_a * 23.75 <= 400
    for rid, (shelves, _) in rig.ctl.targets.items():  # one at a time, in order
        mine = [t for t in on if t.startswith(rid + "/")]
        assert mine == shelves[: len(mine)]
    # nothing changed -> no command, no write
    n_log, n_ev = len(rig.plant.log), rig.store.count_events()
    rep = rig.ctl.reconcile()
    assert not rep.changed and len(rig.plant.log) == n_log and rig.store.count_events() == n_ev
    assert "power budget" in rep.waiting[next(r for r, s in states.items()
                                              if s == "cooling_verified")]


def test_power_on_waits_for_flow(rig: Rig) -> None:
    rig.plant.set_flow("b/r01", 200.0)  # needs 272 L/min
    _onboard(rig)
    assert state_of(rig.store, "b/r01").state == "cabled"
    assert not any(rig.plant.power[t] for t in rig.plant.power if t.startswith("b/"))
    rig.plant.set_flow("b/r01", None)
    rig.ctl.run(until_idle=True, max_passes=50)
    assert state_of(rig.store, "b/r01").state == "burn_in"


def test_coolant_fault_tiers_meet_deadlines(rig: Rig) -> None:
    pol = FaultPolicy()
    _onboard(rig)
    rig.store.append_event("b/r01", "certify.result", {"verdict": "pass", "run_id": "x"})
    set_goal(rig.store, ["b/r01"], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    assert state_of(rig.store, "b/r01").state == "production"
    rig.plant.set_flow("b/r01", 100.0)
    t0 = rig.clock()
    seen: dict[str, float] = {}
    for _ in range(30):
        rig.ctl.reconcile()
        for e in rig.store.events(component_id="b/r01", kind="lifecycle.interlock"):
            seen.setdefault(e.payload["action"], e.payload["at"] - t0)
        rig.clock.advance(pol.period_s)
    for tier in (CoolantTier.WARN, CoolantTier.CAP, CoolantTier.DRAIN, CoolantTier.OFF,
                 CoolantTier.ISOLATE):
        assert seen[tier.name.lower()] <= pol.deadline(tier), seen
    assert seen["cap"] < seen["drain"] < seen["off"] < seen["isolate"]
    tos = [e.payload["to"] for e in rig.store.events(component_id="b/r01",
                                                     kind="lifecycle.transition")]
    assert tos[-4:] == ["degraded", "draining", "maintenance", "isolated"]
    assert not rig.plant.valve_open["b/r01"]
    assert not any(v for t, v in rig.plant.power.items() if t.startswith("b/r01/"))


def test_fault_cleared_before_power_off_returns_to_production(rig: Rig) -> None:
    _onboard(rig)
    rig.store.append_event("b/r01", "certify.result", {"verdict": "pass", "run_id": "x"})
    set_goal(rig.store, ["b/r01"], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    rig.plant.set_inlet("b/r01", 50.0)
    for _ in range(3):
        rig.ctl.reconcile()
        rig.clock.advance(5)
    assert state_of(rig.store, "b/r01").state == "degraded" and "b/r01" in rig.plant.caps
    rig.plant.set_inlet("b/r01", None)
    rig.ctl.reconcile()
    assert state_of(rig.store, "b/r01").state == "production"
    assert "b/r01" not in rig.plant.caps


def test_leak_tiers(rig: Rig) -> None:
    _onboard(rig)
    trays = rig.ctl.targets["b/r01"][1]
    rig.plant.set_leak("b/r01", {trays[0], trays[1]})
    rig.ctl.reconcile()
    assert not rig.plant.power[trays[0]] and not rig.plant.power[trays[1]]
    assert rig.plant.power[trays[2]] and rig.plant.valve_open["b/r01"]
    assert state_of(rig.store, trays[0]).state == "triage"
    assert rig.ctl.reconcile().commands == 0  # handled once
    rig.plant.set_leak("b/r01", set(trays[:3]))  # > 2 trays: isolate the rack
    rig.ctl.reconcile()
    assert state_of(rig.store, "b/r01").state == "isolated"
    assert not rig.plant.valve_open["b/r01"]
    assert not any(v for t, v in rig.plant.power.items() if t.startswith("b/r01/"))
    assert rig.ctl.reconcile().changed is False


def test_production_gate_needs_evidence_newer_than_repair(rig: Rig) -> None:
    _onboard(rig)
    tray = rig.ctl.targets["b/r01"][1][4]
    rig.store.append_event(tray, "certify.result", {"verdict": "pass", "run_id": "old"})
    transition(rig.store, tray, "triage", actor="t", reason="xid")
    transition(rig.store, tray, "repair", actor="t", reason="swap gpu")
    transition(rig.store, tray, "burn_in", actor="t", reason="retest")
    with pytest.raises(EvidenceMissing, match="newer than its last repair"):
        transition(rig.store, tray, "production", actor="t", reason="try")
    rig.store.append_event(tray, "certify.result", {"verdict": "fail", "run_id": "new"})
    with pytest.raises(EvidenceMissing):
        transition(rig.store, tray, "production", actor="t", reason="try")
    rig.store.append_event(tray, "certify.result", {"verdict": "pass", "run_id": "new2"})
    t = transition(rig.store, tray, "production", actor="t", reason="re-certified")
    assert t.dst == "production"


def test_three_bad_trays_cordon_the_rack(rig: Rig) -> None:
    _onboard(rig)
    rig.store.append_event("b/r01", "certify.result", {"verdict": "pass", "run_id": "x"})
    set_goal(rig.store, ["b/r01"], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    trays = rig.ctl.targets["b/r01"][1]
    # the rack's passing result is its trays' evidence too: the controller promotes them
    assert {state_of(rig.store, t).state for t in trays} == {"production"}
    for k, want in ((0, "degraded"), (1, "degraded"), (2, "draining")):
        transition(rig.store, trays[k], "triage", actor="t", reason="finding")
        rig.ctl.reconcile()
        assert state_of(rig.store, "b/r01").state == want
    drained = {n for n, r in rig.slurm.state.items()
               if n.startswith("b-r01-") and r.startswith("rackscale:")}
    assert len(drained) == 18  # the whole rack is drained in Slurm
    # drained once, with the reason of that moment (here: the rack's cordon)
    assert rig.slurm.state["b-r01-c05"] == "rackscale: rack draining"


def test_driver_failure_on_one_rack_does_not_stop_the_fleet(rig: Rig) -> None:
    from rackscale.lifecycle import DriverError, SimPowerDriver

    class Flaky(SimPowerDriver):
        def set_power(self, target: str, on: bool) -> None:
            if target.startswith("b/r01/") and on:
                raise DriverError(f"BMC of {target} timed out")
            super().set_power(target, on)

    rig.ctl.power = Flaky(rig.plant)
    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    for _ in range(30):
        rep = rig.ctl.reconcile()
    assert "timed out" in rep.errors["b/r01"]
    assert state_of(rig.store, "b/r01").state == "cooling_verified"  # rolled back, retried
    assert state_of(rig.store, "a/r01").state == "burn_in"


def test_operator_move_during_a_pass_rolls_back_that_rack_only(rig: Rig) -> None:
    """An operator moves a rack after the controller read it: that rack's writes roll back
    and are retried next pass; the other racks and the controller carry on."""
    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    real_read = rig.cooling.read
    moved = []

    def read():  # runs after the pass read the state rows, before it writes
        if not moved:
            moved.append(transition(rig.store, "b/r01", "cabled", actor="operator",
                                    reason="cabled by hand"))
        return real_read()

    rig.cooling.read = read
    rep = rig.ctl.reconcile()
    assert "b/r01" in rep.errors and "not received" in rep.errors["b/r01"]
    assert state_of(rig.store, "a/r01").state == "cabled"  # the others went on
    tos = [e.payload["to"] for e in rig.store.events(component_id="b/r01",
                                                     kind="lifecycle.transition")]
    assert tos == ["received", "cabled"]  # the operator's move only; the pass rolled back
    rig.ctl.run(until_idle=True, max_passes=200)
    assert state_of(rig.store, "b/r01").state == "burn_in"


def test_slurm_errors_are_clear_and_do_not_stop_the_controller(rig: Rig, tmp_path) -> None:
    """A missing slurm.conf is refused at once (scontrol would retry it for 60 s); a hung
    scontrol becomes a SlurmError, not a traceback; a failing Slurm leaves the racks going."""
    from rackscale.lifecycle import ScontrolSlurm
    from rackscale.lifecycle.slurm import SlurmError

    with pytest.raises(SlurmError, match=r"--slurm-conf .*no such file"):
        ScontrolSlurm(conf=str(tmp_path / "missing.conf"))
    with pytest.raises(SlurmError, match="did not answer in 1 s"):
        ScontrolSlurm(scontrol="sleep", timeout_s=1.0)._run("30")
    broken = tmp_path / "slurm.conf"
    broken.write_text("")  # scontrol: "ClusterName needs to be specified"
    rig.ctl.slurm = ScontrolSlurm(conf=str(broken))
    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    rep = rig.ctl.reconcile()
    assert "scontrol" in rep.errors["slurm"] and rep.transitions > 0
