"""The fleet state's rules, one by one (what `make mutation` scores state/model.py against)."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count
from typing import Any

import pytest

from rackscale.fleet import FleetSpec, Topology
from rackscale.state import ConditionType, FleetState, Status
from rackscale.store import Event, Kind

C = ConditionType
T0 = datetime(2026, 12, 2, tzinfo=UTC)
SPEC = FleetSpec.model_validate({"name": "rules", "regions": [
    {"name": "a", "racks": [{"template": "gb200-nvl72", "names": ["r1", "r10"]},
                            {"template": "hgx-h100", "names": ["h1"]}]}]})


@pytest.fixture
def fs() -> FleetState:
    return FleetState(Topology.build(SPEC))


class Log:
    """Events in seq order, as the store would hand them out."""

    def __init__(self, state: FleetState) -> None:
        self.state, self.seq = state, count(1)
        self.events: dict[int, Event] = {}

    def add(self, cid: str, kind: str, payload: dict[str, Any]) -> int:
        ev = Event(seq=next(self.seq), time=T0, component_id=cid, kind=kind, payload=payload,
                   actor="t", reason="")
        self.state.apply(ev)
        self.events[ev.seq] = ev
        return ev.seq

    def stands(self, seq: int, newest: str | None = None) -> bool:
        return self.state.stands(self.events[seq], newest)

    def result(self, cid: str, verdict: str, run: str, **extra: Any) -> int:
        return self.add(cid, Kind.CERTIFY_RESULT, {"verdict": verdict, "run_id": run,
                                                   "backend": "twin"} | extra)

    def finding(self, cid: str, run: str, verdict: str = "fail", kind: str = "gpu_dead") -> int:
        return self.add(cid, Kind.CERTIFY_FINDING, {
            "component": cid, "kind": kind, "stage": 1, "confidence": 0.9, "run_id": run,
            "backend": "twin", "verdict": verdict})


def cert(fs: FleetState, cid: str) -> tuple[Status, str] | None:
    c = fs.certification(cid)
    return None if c is None else (c.status, c.reason)


def test_the_newest_run_wins_either_way(fs: FleetState) -> None:
    log = Log(fs)
    log.result("a/r1", "pass", "r-1")
    assert cert(fs, "a/r1") == (Status.TRUE, "CertifyPassed")
    bad = log.result("a/r1", "fail", "r-2")
    assert cert(fs, "a/r1") == (Status.FALSE, "CertifyFailed")
    assert fs.gate("a/r1").evidence_seq is None and fs.failing("a/r1").seq == bad
    good = log.result("a/r1", "pass", "r-3")
    assert fs.gate("a/r1").evidence_seq == good and fs.failing("a/r1") is None


def test_not_run_is_no_evidence(fs: FleetState) -> None:
    log = Log(fs)
    first = log.result("a/r1", "not_run", "r-1")
    c = fs.certification("a/r1")
    assert c is not None and (c.status, c.reason, c.seq) == (Status.UNKNOWN, "NotRun", first)
    assert fs.gate("a/r1").evidence_seq is None and fs.failing("a/r1") is None
    ok = log.result("a/r1", "pass", "r-2")
    log.result("a/r1", "not_run", "r-3")  # a later scoped run that left the rack out
    assert fs.gate("a/r1").evidence_seq == ok
    assert fs.certification("a/r1").run_id == "r-2"


def test_a_finding_stands_against_its_own_runs_pass_but_not_a_later_one(fs: FleetState) -> None:
    log = Log(fs)
    seq = log.finding("a/r1/s03", "r-1", kind="nvlink_switch_down")
    log.result("a/r1", "pass", "r-1")  # the ladder's rack verdict of that same run
    c = fs.certification("a/r1")
    assert c is not None and (c.status, c.reason, c.seq) == (Status.FALSE, "Finding", seq)
    assert "nvlink_switch_down at a/r1/s03" in c.message
    later = log.result("a/r1", "pass", "r-2")
    assert fs.gate("a/r1").evidence_seq == later


def test_a_finding_fails_the_tray_or_rack_that_holds_the_part(fs: FleetState) -> None:
    log = Log(fs)
    log.finding("a/r1/c04/nic2", "r-1", kind="bad_cable")
    log.finding("a/h1/n02/nvsw1", "r-1", kind="nvlink_switch_down")
    log.finding("a/r10/cdu", "r-1", kind="coolant_flow_low")
    assert cert(fs, "a/r1/c04") == (Status.FALSE, "Finding")
    assert fs.certification("a/r1") is None  # the tray's part, not the rack's
    assert cert(fs, "a/h1/n02") == (Status.FALSE, "Finding")
    assert cert(fs, "a/r10") == (Status.FALSE, "Finding")
    assert fs.failing("a/r1/c04") is not None and fs.failing("a/r10") is not None


def test_warnings_passes_and_unknown_parts_move_nothing(fs: FleetState) -> None:
    log = Log(fs)
    log.finding("a/r1/c01/gpu0", "r-1", verdict="warn")
    log.finding("a/r1/c01/gpu1", "r-1", verdict="pass")
    log.finding("elsewhere/r9/c01/gpu0", "r-1")
    log.result("elsewhere/r9", "fail", "r-1")
    assert fs.parts_with_conditions() == []
    assert fs.seq == 4  # read, just not kept


def test_a_fabric_finding_marks_every_rack_under_it_until_a_later_pass(fs: FleetState) -> None:
    topo = fs.topo
    leaf = topo.leaves[0]
    under = {topo.racks[int(r)].id for r in set(topo.gpu_rack[topo.affected_gpus(leaf)])}
    log = Log(fs)
    log.result("a/r1", "pass", "r-0")
    log.finding(leaf, "r-1", kind="leaf_degraded")
    for rack in under:
        f = fs.condition(rack, C.FABRIC)
        assert f is not None and f.status is Status.FALSE and leaf in f.message
    for rack in {r.id for r in topo.racks} - under:
        assert fs.condition(rack, C.FABRIC) is None
    assert fs.gate("a/r1").evidence_seq is not None  # shown, not gating: the leaf is shared
    log.result("a/r1", "pass", "r-1")  # the same run: the leaf finding stands
    assert not fs.condition("a/r1", C.FABRIC).ok
    log.result("a/r1", "fail", "r-2")  # a failing run does not clear it either
    assert not fs.condition("a/r1", C.FABRIC).ok
    log.result("a/r1", "pass", "r-3")
    cleared = fs.condition("a/r1", C.FABRIC)
    assert cleared is not None and cleared.ok and cleared.run_id == "r-3"


def test_a_tray_takes_its_racks_result_of_a_newer_run_only(fs: FleetState) -> None:
    log = Log(fs)
    log.result("a/r1/c02", "fail", "r-1", findings=["a/r1/c02/gpu1"])
    log.result("a/r1", "pass", "r-1")  # same run: the tray's own result decides
    assert cert(fs, "a/r1/c02") == (Status.FALSE, "CertifyFailed")
    assert fs.failing("a/r1/c02") is not None
    log.result("a/r1", "pass", "r-2")  # a newer run that named only the rack
    assert cert(fs, "a/r1/c02") == (Status.TRUE, "CertifyPassed")
    assert fs.failing("a/r1/c02") is None
    assert cert(fs, "a/r1/c03") == (Status.TRUE, "CertifyPassed")  # no result of its own
    log.result("a/r1", "not_run", "r-3")
    assert fs.certification("a/r1/c03").run_id == "r-2"
    own = log.result("a/r1/c03", "fail", "r-4", findings=["a/r1/c03/gpu0"])
    assert fs.certification("a/r1/c03").seq == own  # its own, newer than the rack's


def test_a_tray_failed_for_its_racks_part_is_held_by_the_rack(fs: FleetState) -> None:
    log = Log(fs)
    log.result("a/r1/c05", "fail", "r-1", findings=["a/r1/ps2"])
    c = fs.certification("a/r1/c05")
    assert c is not None and (c.status, c.reason) == (Status.FALSE, "RackPartFailed")
    assert fs.gate("a/r1/c05").evidence_seq is None  # it cannot serve...
    assert fs.failing("a/r1/c05") is None  # ...but it is not the part to pull
    log.result("a/r1/c06", "fail", "r-1", findings=["a/r1/ps2", "a/r1/c06/gpu3"])
    assert cert(fs, "a/r1/c06") == (Status.FALSE, "CertifyFailed")
    log.result("a/r1/c07", "fail", "r-1", findings=["a/r1/c07"])  # the tray itself
    assert cert(fs, "a/r1/c07") == (Status.FALSE, "CertifyFailed")


def test_the_gate_needs_evidence_newer_than_the_floor(fs: FleetState) -> None:
    assert fs.gate("a/r1").why == "no certification on record"
    seq = Log(fs).result("a/r1", "pass", "r-1")
    assert fs.gate("a/r1", floor=seq - 1).evidence_seq == seq
    for floor in (seq, seq + 1):
        g = fs.gate("a/r1", floor=floor)
        assert g.evidence_seq is None and not g.open and "older than its last repair" in g.why
    assert fs.gate("a/r1", floor=seq - 1).open


def test_events_apply_once_in_seq_order(fs: FleetState) -> None:
    ev = Event(seq=5, time=T0, component_id="a/r1", kind=Kind.CERTIFY_RESULT,
               payload={"verdict": "pass", "run_id": "x"}, actor="t", reason="")
    fs.apply(ev)
    for seq in (5, 4):
        with pytest.raises(ValueError, match="not newer"):
            fs.apply(Event(seq=seq, time=T0, component_id="a/r1", kind=Kind.CERTIFY_RESULT,
                           payload={"verdict": "fail", "run_id": "y"}, actor="t", reason=""))
    assert fs.seq == 5 and fs.certification("a/r1").ok


def test_lifecycle_states_and_the_finding_that_moved_them(fs: FleetState) -> None:
    log = Log(fs)
    log.add("a/r1/c01", Kind.LIFECYCLE_TRANSITION, {"from": None, "to": "onboard"})
    seq = log.add("a/r1/c01", Kind.LIFECYCLE_TRANSITION,
                  {"from": "production", "to": "triage", "finding_seq": 1})
    st = fs.lifecycle["a/r1/c01"]
    assert (st.state, st.seq, st.finding_seq) == ("triage", seq, 1)
    assert fs.state_of("a/r1/c01") == "triage" and fs.state_of("a/r1") is None


def test_the_plant_conditions_of_each_rack(fs: FleetState) -> None:
    assert fs.condition("a/r1", C.COOLING) is None and fs.plant is None
    log = Log(fs)
    seq = log.add("rules", Kind.TWIN_PLANT, {"faults": [
        {"target": "a/r1/cdu", "kind": "coolant_flow_low", "severity": 0.55},
        {"target": "a/h1/ps2", "kind": "power_shelf_down"},
        {"target": "a/r1/c01/gpu0", "kind": "slow_gpu", "severity": 0.8}], "seed": 3})
    low = fs.condition("a/r1", C.COOLING)
    assert low is not None and (low.status, low.reason, low.seq) == (
        Status.FALSE, "coolant_flow_low", seq)
    assert "severity 0.55" in low.message and "simulated" in low.message
    ok = fs.condition("a/r10", C.COOLING)  # r1's fault is not r10's (ids share a prefix)
    assert ok is not None and ok.status is Status.TRUE and ok.seq == seq
    down = fs.condition("a/h1", C.POWER)
    assert down is not None and down.status is Status.FALSE and "severity" not in down.message
    assert fs.condition("a/r1", C.POWER).ok
    assert fs.condition("a/r1/c01", C.COOLING) is None  # a rack's condition only
    assert fs.plant is not None and fs.plant.seed == 3
    log.add("rules", Kind.TWIN_PLANT, {"faults": []})  # the next run's plant is clean
    assert fs.condition("a/r1", C.COOLING).ok
    types = [c.type for c in fs.conditions("a/r1")]
    assert types == [C.COOLING, C.POWER]


def test_conditions_list_a_trays_certification_as_it_is_decided(fs: FleetState) -> None:
    log = Log(fs)
    log.result("a/r1", "pass", "r-1")
    [c] = fs.conditions("a/r1/c09")
    assert c.type is C.CERTIFIED and c.ok and c.run_id == "r-1"
    assert c.as_dict() == {"type": "Certified", "status": "True", "reason": "CertifyPassed",
                           "message": "certify.result pass in run r-1", "seq": 1,
                           "since": T0.isoformat(), "run_id": "r-1"}
    log.result("a/r1", "fail", "r-2", findings=["a/r1/ps1"])
    assert "(a/r1/ps1)" in fs.certification("a/r1").message


def test_run_ids_are_compared_for_identity_not_order(fs: FleetState) -> None:
    """Run ids are opaque (hex uuids): a later run may sort before an earlier one."""
    log = Log(fs)
    log.finding("a/r1/s02", "z-run", kind="nvlink_switch_down")
    later = log.result("a/r1", "pass", "a-run")  # a later run whose id sorts lower
    assert fs.gate("a/r1").evidence_seq == later
    log.finding(fs.topo.leaves[0], "z2-run", kind="leaf_degraded")
    log.result("a/r1", "pass", "a2-run")
    assert fs.condition("a/r1", C.FABRIC).ok
    log.result("a/r10/c03", "fail", "z3-run", findings=["a/r10/c03/gpu0"])
    log.result("a/r10", "pass", "a3-run")  # the rack's newer run, id sorting lower
    assert cert(fs, "a/r10/c03") == (Status.TRUE, "CertifyPassed")


def test_a_finding_names_its_part_in_the_payload_not_the_event(fs: FleetState) -> None:
    log = Log(fs)
    log.add("rules", Kind.CERTIFY_FINDING, {  # the event filed under the fleet's name
        "component": "a/r1/c08/gpu2", "kind": "sdc", "stage": 1, "confidence": 0.9,
        "run_id": "r-1", "backend": "twin", "verdict": "fail"})
    assert cert(fs, "a/r1/c08") == (Status.FALSE, "Finding")


def test_a_finding_on_a_region_moves_no_rack(fs: FleetState) -> None:
    log = Log(fs)
    log.finding("a", "r-1", kind="leaf_down")
    assert fs.parts_with_conditions() == []


def test_a_tray_held_by_its_failed_rack_is_not_pulled_itself(fs: FleetState) -> None:
    log = Log(fs)
    log.finding("a/r1/ps1", "r-1", kind="power_shelf_down")
    assert cert(fs, "a/r1/c01") == (Status.FALSE, "Finding")  # the rack's, inherited
    assert fs.gate("a/r1/c01").evidence_seq is None
    assert fs.failing("a/r1/c01") is None and fs.failing("a/r1") is not None


def test_a_trays_result_failed_for_another_trays_part_is_not_its_own(fs: FleetState) -> None:
    log = Log(fs)
    log.result("a/r1/c05", "fail", "r-1", findings=["a/r1/c04/gpu1"])
    assert cert(fs, "a/r1/c05") == (Status.FALSE, "RackPartFailed")
    log.result("a/r1/c06", "fail", "r-1", findings=["a/r1/c06x/gpu1"])  # a prefix, not a part
    assert cert(fs, "a/r1/c06") == (Status.FALSE, "RackPartFailed")


def test_refresh_reads_on_from_its_cursor(tmp_path: Any) -> None:
    from rackscale.store import Store, load_topology

    topo = Topology.build(SPEC)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    load_topology(store, topo)  # fleet.* events: read past, not folded
    first = [store.append_event("a/r1", Kind.CERTIFY_RESULT,
                                {"verdict": v, "run_id": f"r-{i}", "backend": "twin"})
             for i, v in enumerate(("pass", "fail", "pass"))]
    live = FleetState(topo)
    assert live.refresh(store) == 3
    assert live.seq == first[-1] and live.gate("a/r1").evidence_seq == first[-1]
    assert live.refresh(store) == 0 and live.seq == first[-1]
    store.append_event("rules", Kind.FLEET_LOADED, {"fleet": "rules", "changed": False})
    bad = store.append_event("a/r1", Kind.CERTIFY_RESULT,
                             {"verdict": "fail", "run_id": "r-9", "backend": "twin"})
    other = store.append_event("a/r10", Kind.CERTIFY_RESULT,
                               {"verdict": "pass", "run_id": "r-9", "backend": "twin"})
    assert live.refresh(store, until_seq=bad) == 1 and live.seq == bad
    assert live.failing("a/r1").seq == bad and live.certification("a/r10") is None
    assert live.refresh(store) == 1 and live.seq == other
    skipped = store.append_event("rules", Kind.FLEET_LOADED, {"fleet": "rules", "changed": False})
    assert live.refresh(store) == 0 and live.seq == skipped  # past what it does not fold
    store.append_event("rules", Kind.FLEET_LOADED, {"fleet": "rules", "changed": False})
    last = store.append_event("rules", Kind.FLEET_LOADED, {"fleet": "rules", "changed": False})
    assert live.refresh(store) == 0 and live.seq == last  # to the newest read, not the first
    fresh = FleetState.load(store, topo)
    assert fresh.seq == other  # a first read asks for the folded kinds only
    assert [fresh.conditions(p) for p in ("a/r1", "a/r10")] == \
        [live.conditions(p) for p in ("a/r1", "a/r10")]
    assert FleetState.load(store, topo, until_seq=first[0]).gate("a/r1").evidence_seq == first[0]
    store.close()


def test_seqs_and_floors_are_passed_by_name(tmp_path: Any) -> None:
    """`until_seq` and `floor` are seqs: a bare number in their place is refused, so a call
    cannot read up to (or gate from) a seq it did not name."""
    from rackscale.store import Store

    topo = Topology.build(SPEC)
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    state = FleetState(topo)
    with pytest.raises(TypeError):
        FleetState.load(store, topo, 5)  # type: ignore[misc]  # the rule under test
    with pytest.raises(TypeError):
        state.refresh(store, 5)  # type: ignore[misc]  # the rule under test
    with pytest.raises(TypeError):
        state.gate("a/r1", 5)  # type: ignore[misc]  # the rule under test
    store.close()


def test_what_the_state_hands_out_cannot_be_changed_by_a_reader(fs: FleetState) -> None:
    """Views share the state's records; one that assigned to a record would change what every
    other view reads."""
    from dataclasses import FrozenInstanceError

    log = Log(fs)
    log.add("a/r1", Kind.LIFECYCLE_TRANSITION, {"from": None, "to": "cabled"})
    with pytest.raises(FrozenInstanceError):
        fs.lifecycle["a/r1"].state = "production"  # type: ignore[misc]  # the rule under test
    gate = fs.gate("a/r1")
    with pytest.raises(FrozenInstanceError):
        gate.evidence_seq = 1  # type: ignore[misc]  # the rule under test


# ---------------------------------------------------------------- which evidence stands
def test_a_result_stands_until_a_newer_run_speaks_of_its_part(fs: FleetState) -> None:
    log = Log(fs)
    a = log.result("a/r1", "pass", "r-1")
    b = log.result("a/r1", "not_run", "r-2")  # a scoped run of another rack
    assert log.stands(a) and not log.stands(b)
    c = log.result("a/r1", "fail", "r-3")
    assert not log.stands(a) and log.stands(c)
    first = log.result("a/r10", "not_run", "r-1")  # never tested: the not_run is all there is
    assert log.stands(first)


def test_a_tray_result_gives_way_to_a_newer_result_of_its_rack(fs: FleetState) -> None:
    log = Log(fs)
    tray = log.result("a/r1/c02", "pass", "r-1")
    log.result("a/r1", "pass", "r-1")
    assert log.stands(tray)
    log.result("a/r1", "fail", "r-2")  # the rack's newer run said nothing of the tray
    assert not log.stands(tray)
    again = log.result("a/r1/c02", "pass", "r-3")
    assert log.stands(again)


def test_a_finding_stands_while_its_tray_rests_on_its_run(fs: FleetState) -> None:
    log = Log(fs)
    warn = log.finding("a/r1/c02/gpu1", "r-1", verdict="warn", kind="slow_gpu")
    bad = log.finding("a/r1/c03/gpu0", "r-1")
    log.result("a/r1", "pass", "r-1")
    assert log.stands(warn) and log.stands(bad)
    log.result("a/r1/c03", "not_run", "r-2")
    log.result("a/r1", "not_run", "r-2")
    assert log.stands(warn) and log.stands(bad)  # the scoped run left the rack out
    log.result("a/r1/c03", "pass", "r-3")  # the repaired tray recertified
    assert not log.stands(bad) and log.stands(warn)
    log.result("a/r1", "pass", "r-4")  # a newer run of the whole rack
    assert not log.stands(warn)


def test_a_finding_on_a_rack_part_stands_until_the_rack_passes_again(fs: FleetState) -> None:
    log = Log(fs)
    cdu = log.finding("a/r10/cdu", "r-1", kind="coolant_flow_low")
    log.result("a/r10", "pass", "r-1")  # the same run's pass cannot clear its own finding
    assert log.stands(cdu)
    log.result("a/r10", "pass", "r-2")
    assert not log.stands(cdu)


def test_a_fabric_finding_stands_while_a_rack_under_it_is_marked_or_rests_on_it(
        fs: FleetState) -> None:
    log = Log(fs)
    leaf = fs.topo.leaves[0]  # under a/r1 and a/r10
    warn = log.finding(leaf, "r-1", verdict="warn", kind="leaf_degraded")
    assert not log.stands(warn)  # a warning marks nothing, and no rack rests on r-1 yet
    log.result("a/r1", "pass", "r-1")
    assert log.stands(warn)
    bad = log.finding(leaf, "r-2", kind="leaf_degraded")
    log.result("a/r1", "pass", "r-3")
    assert not log.stands(warn)
    assert log.stands(bad)  # a/r10 still carries the leaf's FabricHealthy false
    log.result("a/r10", "pass", "r-3")
    assert not log.stands(bad)
    elsewhere = log.finding("a/leaf-rail1-1", "r-4", verdict="warn", kind="leaf_degraded")
    log.result("a/r1", "pass", "r-4")  # a rack the leaf does not serve (only a/h1)
    assert not log.stands(elsewhere)
    log.result("a/h1", "pass", "r-4")
    assert log.stands(elsewhere)


def test_evidence_on_no_part_of_the_fleet_stands_with_the_newest_run(fs: FleetState) -> None:
    log = Log(fs)
    fleet_wide = log.finding("rules", "r-1", kind="probe_failed")
    stray = log.result("b/r9", "fail", "r-1")
    assert log.stands(fleet_wide, "r-1") and log.stands(stray, "r-1")
    assert not log.stands(fleet_wide, "r-2") and not log.stands(stray, "r-2")
    assert not log.stands(fleet_wide, None)


def test_a_finding_stands_by_the_part_it_names_not_the_event_it_came_in(fs: FleetState) -> None:
    log = Log(fs)
    seq = log.add("a/r1", Kind.CERTIFY_FINDING, {
        "component": "a/r1/c03/gpu0", "kind": "gpu_dead", "stage": 1, "confidence": 0.9,
        "run_id": "r-1", "backend": "twin", "verdict": "fail"})
    log.result("a/r1", "pass", "r-1")
    assert log.stands(seq)
    log.result("a/r1/c03", "pass", "r-2")  # the tray it names recertified; the rack was not
    assert not log.stands(seq)


def test_a_finding_on_a_region_stands_with_the_newest_run_only(fs: FleetState) -> None:
    log = Log(fs)
    seq = log.finding("a", "r-2", kind="probe_failed")
    log.result("a/r1", "pass", "r-2")  # a rack of the region rests on its run: not what counts
    assert log.stands(seq, "r-2")
    assert not log.stands(seq, "r-1") and not log.stands(seq, "r-3")
    stray = log.result("b/r9", "pass", "r-2")
    assert not log.stands(stray, "r-1") and not log.stands(stray, "r-3")


def test_a_warning_on_a_leaf_does_not_stand_on_an_older_fabric_finding(fs: FleetState) -> None:
    log = Log(fs)
    leaf = fs.topo.leaves[0]
    log.finding(leaf, "r-1", kind="leaf_degraded")  # FabricHealthy false, of run r-1
    warn = log.finding(leaf, "r-2", verdict="warn", kind="leaf_degraded")
    assert not log.stands(warn)  # no rack rests on r-2, and the fabric mark is r-1's


def test_only_results_and_findings_are_asked_whether_they_stand(fs: FleetState) -> None:
    log = Log(fs)
    seq = log.add("a/r1", Kind.LIFECYCLE_TRANSITION, {"from": None, "to": "received"})
    with pytest.raises(ValueError, match=r"lifecycle\.transition: only certification"):
        log.stands(seq)
