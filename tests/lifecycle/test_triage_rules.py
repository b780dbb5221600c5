"""Triage's rules, one decision per test (what `make mutation` scores lifecycle/triage.py
against): findings -> triage, rack-level cordons, NVL72 escalation, notes, and the way back."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rackscale.fleet import FleetSpec, Topology
from rackscale.lifecycle import repository
from rackscale.lifecycle.repository import TRANSITION, LifecycleRow
from rackscale.lifecycle.triage import TriageReport, apply_findings, promote_passing
from rackscale.store import Kind, Store, load_topology

SPEC = FleetSpec.model_validate({"name": "triage", "regions": [
    {"name": "a", "racks": [{"template": "gb200-nvl72", "names": ["r1", "r2"]},
                            {"template": "hgx-h100", "names": ["h1"]}]}]})
TOPO = Topology.build(SPEC)
R1, R2, H1 = "a/r1", "a/r2", "a/h1"


class Fleet:
    def __init__(self, db: str) -> None:
        self.store = Store(db)

    def put(self, cid: str, state: str, *, fault_tier: int = 0, **extra: Any) -> int:
        """Set a part's state as a move would (its transition event, then the row)."""
        with self.store.session() as s:
            row = repository.get_row(s, cid)
            seq = self.store.append_event(cid, TRANSITION, {"from": row.state, "to": state}
                                          | extra, actor="t", reason="set", session=s)
            row.state, row.seq, row.fault_tier = state, seq, fault_tier
        return seq

    def rack(self, rack: str, state: str, trays: str | None = None, **kw: Any) -> None:
        self.put(rack, state, **kw)
        if trays is not None:
            for t in repository.trays_of(self.store, rack):
                self.put(t.component_id, trays)

    def finding(self, cid: str, *, verdict: str = "fail", kind: str = "gpu_dead",
                run: str = "run-1", component: str | None = None) -> int:
        return self.store.append_event(cid, Kind.CERTIFY_FINDING, {
            "component": cid if component is None else component, "kind": kind, "stage": "gpu",
            "confidence": 0.9, "run_id": run, "backend": "twin", "verdict": verdict})

    def result(self, cid: str, verdict: str = "pass", run: str = "run-2") -> int:
        return self.store.append_event(cid, Kind.CERTIFY_RESULT, {
            "run_id": run, "backend": "twin", "verdict": verdict})

    def state(self, cid: str) -> str:
        return repository.state_of(self.store, cid).state

    def last_move(self, cid: str) -> dict[str, Any]:
        return [e for e in repository.history(self.store, cid) if e["kind"] == TRANSITION][-1]

    def notes(self) -> list[dict[str, Any]]:
        return [e.as_dict() for e in self.store.events(kind=repository.NOTED)]

    def apply(self, **kw: Any) -> TriageReport:
        return apply_findings(self.store, TOPO, **kw)

    def promote(self, **kw: Any) -> TriageReport:
        return promote_passing(self.store, TOPO, **kw)

    def snapshot(self) -> tuple[Any, int]:
        return repository.counts(self.store), self.store.count_events()


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet loaded and enrolled once; each test gets a copy (seconds per scorer run)."""
    path = tmp_path_factory.mktemp("triage") / "enrolled.db"
    store = Store(f"sqlite:///{path}")
    load_topology(store, TOPO)
    repository.open_store(store)
    repository.enroll(store, TOPO)
    store.close()
    return path


@pytest.fixture
def fl(tmp_path: Path, enrolled: Path) -> Iterator[Fleet]:
    shutil.copy(enrolled, tmp_path / "triage.db")
    f = Fleet(f"sqlite:///{tmp_path / 'triage.db'}")
    yield f
    f.store.close()


def tray(rack: str, n: int) -> str:
    return f"{rack}/c{n:02d}" if rack != H1 else f"{rack}/n{n:02d}"


# ------------------------------------------------------------------ apply_findings: trays
def test_a_tray_whose_newest_certification_failed_goes_to_triage(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    seq = fl.finding(f"{R1}/c03/gpu0")
    rep = fl.apply()
    assert rep.as_dict() == {"findings": 1, "trays_triaged": [f"{R1}/c03"],
                             "racks_rack_level": [], "racks_escalated": [], "noted": [],
                             "promoted": {}}
    assert fl.state(f"{R1}/c03") == "triage" and fl.state(f"{R1}/c04") == "production"
    moved = fl.last_move(f"{R1}/c03")
    assert moved["payload"] == {"from": "production", "to": "triage", "finding_seq": seq}
    assert moved["reason"].startswith("newest certification failed: ")
    assert f"(event {seq})" in moved["reason"] and moved["actor"] == "lifecycle-triage"
    assert fl.state(R1) == "production"  # one tray out: tolerated


def test_a_repair_newer_than_the_failure_keeps_the_tray(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{R1}/c03/gpu0")
    fl.put(f"{R1}/c03", "triage")
    fl.put(f"{R1}/c03", "repair")
    fl.put(f"{R1}/c03", "burn_in")
    rep = fl.apply(actor="me")
    assert rep.trays_triaged == [] and fl.state(f"{R1}/c03") == "burn_in"


def test_a_tray_already_out_is_not_moved_again(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(f"{R1}/c03", "repair")
    fl.finding(f"{R1}/c03/gpu0")  # newer than the repair, but the tray is out already
    rep = fl.apply()
    assert rep.trays_triaged == [] and fl.state(f"{R1}/c03") == "repair"


def test_a_rack_finding_and_a_tray_finding_of_one_rack_both_act(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{R1}/s01", kind="nvlink_switch_down")
    fl.finding(f"{R1}/c05/nic0", kind="bad_cable")
    rep = fl.apply()
    assert rep.racks_rack_level == [R1] and rep.trays_triaged == [f"{R1}/c05"]
    assert fl.state(R1) == "draining" and fl.state(f"{R1}/c05") == "triage"


# ------------------------------------------------------------------ apply_findings: racks
@pytest.mark.parametrize("serving", ["production", "degraded"])
def test_a_rack_level_failure_cordons_a_serving_rack(fl: Fleet, serving: str) -> None:
    fl.rack(R1, serving)
    seq = fl.finding(f"{R1}/s01", kind="nvlink_switch_down")
    rep = fl.apply()
    assert rep.racks_rack_level == [R1] and rep.racks_escalated == [] and rep.noted == []
    assert fl.state(R1) == "draining"
    moved = fl.last_move(R1)
    assert moved["payload"] == {"from": serving, "to": "draining", "finding_seq": seq}
    assert moved["reason"].startswith("rack-level: newest certification failed: ")
    assert rep.trays_triaged == []  # the rack's part, not a tray's


@pytest.mark.parametrize("bring_up", ["powered", "firmware", "burn_in", "certified"])
def test_a_rack_level_failure_sends_a_bring_up_rack_to_maintenance(fl: Fleet,
                                                                   bring_up: str) -> None:
    fl.rack(R1, bring_up)
    seq = fl.finding(f"{R1}/cdu", kind="coolant_flow_low")
    rep = fl.apply()
    assert rep.racks_rack_level == [R1] and fl.state(R1) == "maintenance"
    assert fl.last_move(R1)["payload"]["finding_seq"] == seq


@pytest.mark.parametrize("out", ["draining", "maintenance", "isolated", "cabled", "received"])
def test_a_rack_level_failure_moves_nothing_already_out(fl: Fleet, out: str) -> None:
    fl.rack(R1, out)
    fl.finding(f"{R1}/ps1", kind="power_shelf_down")
    before = fl.snapshot()
    rep = fl.apply()
    assert rep.racks_rack_level == [] and fl.state(R1) == out
    assert fl.snapshot()[1] == before[1]  # no event: the cursor is a row, not an event


def test_a_repair_newer_than_the_rack_failure_keeps_the_rack(fl: Fleet) -> None:
    fl.rack(R1, "production")
    fl.finding(f"{R1}/s01", kind="nvlink_switch_down")
    fl.put(R1, "maintenance")
    fl.put(R1, "cooling_verified")
    fl.put(R1, "powered")
    rep = fl.apply()
    assert rep.racks_rack_level == [] and fl.state(R1) == "powered"


# ------------------------------------------------------------------ escalation
def test_more_bad_trays_than_tolerated_cordon_an_nvl72_rack(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    for n in (1, 2, 3):
        fl.finding(f"{tray(R1, n)}/gpu0")
    rep = fl.apply()
    assert rep.trays_triaged == [tray(R1, n) for n in (1, 2, 3)]
    assert rep.racks_escalated == [R1] and rep.racks_rack_level == []
    assert fl.state(R1) == "draining"
    moved = fl.last_move(R1)
    assert moved["reason"] == "3 trays bad (> 2): NVL72 rack cordoned"
    assert moved["payload"] == {"from": "production", "to": "draining"}


def test_exactly_the_tolerated_bad_trays_do_not_cordon(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{tray(R1, 1)}/gpu0")
    fl.finding(f"{tray(R1, 2)}/gpu0")
    rep = fl.apply()
    assert len(rep.trays_triaged) == 2 and rep.racks_escalated == []
    assert fl.state(R1) == "production"


def test_trays_already_out_count_towards_the_limit(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(tray(R1, 1), "repair")
    fl.put(tray(R1, 2), "rma")
    fl.put(tray(R2, 1), "repair")  # another rack's: not counted
    fl.finding(f"{tray(R1, 3)}/gpu0")
    rep = fl.apply()
    assert rep.racks_escalated == [R1] and fl.state(R1) == "draining"


def test_other_racks_bad_trays_do_not_count(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.rack(R2, "production", trays="production")
    fl.put(tray(R1, 1), "repair")  # a rack whose id sorts first, and one after
    fl.put(tray(R1, 2), "repair")
    fl.put(f"{TOPO.racks[-1].id}/n01", "repair")
    fl.finding(f"{tray(R2, 3)}/gpu0")
    rep = fl.apply()
    assert rep.racks_escalated == [] and fl.state(R2) == "production"


def test_a_bad_rack_row_does_not_count_as_a_bad_tray(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(tray(R1, 1), "repair")
    with fl.store.session() as s:  # a rack row in a state spelled like a bad tray's
        s.add(LifecycleRow(component_id=f"{R1}/x", machine="rack", rack=R1, state="rma",
                           seq=1, goal=None, fault_since=None, fault_tier=0,
                           updated=repository.datetime.now(repository.UTC)))
    fl.finding(f"{tray(R1, 3)}/gpu0")
    fl.finding(f"{tray(R1, 3)}/gpu1")
    rep = fl.apply()
    assert rep.trays_triaged == [tray(R1, 3)] and rep.racks_escalated == []  # 2 bad trays


def test_hgx_nodes_never_cordon_their_rack(fl: Fleet) -> None:
    fl.rack(H1, "production", trays="production")
    for n in (1, 2, 3):
        fl.finding(f"{tray(H1, n)}/gpu0")
    rep = fl.apply()
    assert len(rep.trays_triaged) == 3 and rep.racks_escalated == []
    assert fl.state(H1) == "production"


def test_an_escalation_of_a_rack_already_out_is_not_reported(fl: Fleet) -> None:
    fl.rack(R1, "maintenance", trays="production")
    for n in (1, 2, 3):
        fl.finding(f"{tray(R1, n)}/gpu0")
    rep = fl.apply()
    assert len(rep.trays_triaged) == 3 and rep.racks_escalated == []
    assert fl.state(R1) == "maintenance"


def test_a_rack_level_cordon_is_not_escalated_again(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{R1}/s01", kind="nvlink_switch_down")
    for n in (1, 2, 3):
        fl.finding(f"{tray(R1, n)}/gpu0")
    rep = fl.apply()
    assert rep.racks_rack_level == [R1] and rep.racks_escalated == []


# ------------------------------------------------------------------ notes and the cursor
def test_findings_that_move_nothing_are_noted_once(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    leaf, spine = TOPO.leaves[0], f"{TOPO.ids[TOPO.idx('a')]}/spine-0"
    seqs = [fl.finding(leaf, kind="leaf_degraded"), fl.finding(spine, kind="spine_down"),
            fl.finding("a", kind="unlocalized"),
            fl.finding("elsewhere/r9/c01/gpu0"),
            fl.finding(f"{R1}/c02/gpu1", verdict="warn", kind="slow_gpu")]
    rep = fl.apply()
    cids = [leaf, spine, "a", "elsewhere/r9/c01/gpu0", f"{R1}/c02/gpu1"]
    assert rep.findings == 5 and rep.noted == cids and rep.trays_triaged == []
    notes = fl.notes()
    assert [n["component"] for n in notes] == cids
    assert [n["payload"] for n in notes] == [{"finding_seq": s, "action": "none"}
                                             for s in seqs]
    assert [n["reason"] for n in notes] == [
        "leaf finding: shared fabric, no tray moves",
        "spine finding: shared fabric, no tray moves",
        "region finding: no lifecycle handling",
        "unknown component: not in this fleet",
        "verdict warn: recorded, no move"]
    assert fl.state(f"{R1}/c02") == "production" and fl.state(R1) == "production"
    with fl.store.session() as s:
        assert repository.cursor(s, "certify.finding") == seqs[-1]
    again = fl.apply()
    assert again.findings == 0 and again.noted == [] and len(fl.notes()) == 5


def test_a_finding_names_its_component_in_the_payload(fl: Fleet) -> None:
    fl.finding(R1, component=TOPO.leaves[0], kind="leaf_degraded")
    rep = fl.apply()
    assert rep.noted == [TOPO.leaves[0]] and fl.state(R1) == "received"


def test_only_findings_after_the_cursor_are_read(fl: Fleet) -> None:
    fl.finding(TOPO.leaves[0], kind="leaf_degraded")
    assert fl.apply().findings == 1
    later = fl.finding(TOPO.leaves[1], kind="leaf_degraded")
    rep = fl.apply()
    assert rep.findings == 1 and rep.noted == [TOPO.leaves[1]]
    with fl.store.session() as s:
        assert repository.cursor(s, "certify.finding") == later
    assert fl.apply(after_seq=0).findings == 2  # from a given seq: the cursor is not read


def test_a_read_from_past_the_findings_leaves_the_cursor(fl: Fleet) -> None:
    first = fl.finding(TOPO.leaves[0], kind="leaf_degraded")
    fl.apply()
    fl.finding(TOPO.leaves[1], kind="leaf_degraded")
    past = fl.result(R2, "not_run")
    assert fl.apply(after_seq=past).findings == 0
    with fl.store.session() as s:
        assert repository.cursor(s, "certify.finding") == first
    assert fl.apply().noted == [TOPO.leaves[1]]


def test_apply_findings_is_idempotent(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.rack(R2, "burn_in")
    for n in (1, 2, 3):
        fl.finding(f"{tray(R1, n)}/gpu0")
    fl.finding(f"{R2}/s01", kind="nvlink_switch_down")
    fl.finding(TOPO.leaves[0], kind="leaf_degraded")
    fl.apply()
    snap = fl.snapshot()
    rep = fl.apply(after_seq=0)
    assert rep.findings == 5 and rep.trays_triaged == [] and rep.racks_rack_level == []
    assert rep.racks_escalated == [] and len(rep.noted) == 1
    rep = fl.apply()
    assert rep.as_dict() == TriageReport().as_dict()
    assert fl.snapshot()[0] == snap[0]


# ------------------------------------------------------------------ promote_passing
def test_a_burn_in_rack_with_a_pass_goes_to_production_and_its_trays_with_it(fl: Fleet) -> None:
    fl.rack(R1, "burn_in", trays="burn_in")
    ev = fl.result(R1)
    rep = fl.promote()
    assert rep.promoted == {"rack_certified": 1, "rack_production": 1, "tray_production": 18}
    assert fl.state(R1) == "production" and fl.state(tray(R1, 7)) == "production"
    assert fl.last_move(R1)["payload"] == {"from": "certified", "to": "production",
                                           "evidence_seq": ev}
    assert fl.last_move(R1)["reason"] == "certified"
    assert fl.last_move(tray(R1, 7))["reason"] == "passing certification on record"


@pytest.mark.parametrize("verdict", ["fail", None])
def test_no_promotion_without_a_newest_pass(fl: Fleet, verdict: str | None) -> None:
    fl.rack(R1, "burn_in", trays="burn_in")
    fl.result(R1, "pass", run="run-1")
    if verdict is not None:
        fl.result(R1, verdict)
    if verdict is None:
        fl.put(R1, "maintenance")  # a repair after the pass
        fl.put(R1, "cooling_verified")
        fl.put(R1, "powered")
        fl.put(R1, "firmware")
        fl.put(R1, "burn_in")
    rep = fl.promote()
    assert fl.state(R1) == "burn_in" and fl.state(tray(R1, 1)) == "burn_in"
    assert rep.promoted == {}


def test_a_certified_rack_waits_with_more_bad_trays_than_tolerated(fl: Fleet) -> None:
    fl.rack(R1, "certified", trays="burn_in")
    for n in (1, 2, 3):
        fl.put(tray(R1, n), "repair")
    fl.result(R1)
    rep = fl.promote()
    assert fl.state(R1) == "certified" and rep.promoted == {}
    assert fl.state(tray(R1, 4)) == "burn_in"  # not a serving rack's


def test_a_certified_rack_at_the_limit_serves_degraded(fl: Fleet) -> None:
    fl.rack(R1, "certified", trays="burn_in")
    fl.put(tray(R1, 1), "repair")
    fl.put(tray(R1, 2), "triage")
    fl.result(R1)
    rep = fl.promote()
    assert rep.promoted == {"rack_degraded": 1, "tray_production": 16}
    assert fl.state(R1) == "degraded"
    # straight from certified: the rack never shows production while trays are out
    assert fl.last_move(R1)["payload"]["from"] == "certified"
    assert fl.last_move(R1)["reason"] == ("certified; 2 trays out (<= 2 tolerated by jobs on "
                                          "its NVLink domain)")


def test_burn_in_trays_of_a_rack_not_serving_wait(fl: Fleet) -> None:
    fl.rack(R1, "maintenance", trays="burn_in")
    fl.result(tray(R1, 1))
    rep = fl.promote()
    assert rep.promoted == {} and fl.state(tray(R1, 1)) == "burn_in"


def test_a_burn_in_tray_of_a_serving_rack_needs_its_own_pass(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(tray(R1, 1), "triage")
    fl.put(tray(R1, 1), "repair")
    fl.put(tray(R1, 1), "burn_in")
    fl.put(tray(R1, 2), "triage")
    fl.put(tray(R1, 2), "repair")
    fl.put(tray(R1, 2), "burn_in")
    fl.result(tray(R1, 1))
    rep = fl.promote()
    assert fl.state(tray(R1, 1)) == "production" and fl.state(tray(R1, 2)) == "burn_in"
    assert rep.promoted == {"tray_production": 1}  # burn_in is not out: no degrade


def triaged(fl: Fleet, rack_state: str = "production") -> str:
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{tray(R1, 4)}/gpu0")
    fl.apply()
    if rack_state != "production":
        fl.put(R1, rack_state)
    return tray(R1, 4)


@pytest.mark.parametrize(("rack_state", "back_to"), [("production", "production"),
                                                      ("degraded", "production"),
                                                      ("draining", "burn_in"),
                                                      ("maintenance", "burn_in")])
def test_a_tray_triaged_on_a_finding_returns_on_a_newer_pass(fl: Fleet, rack_state: str,
                                                             back_to: str) -> None:
    t = triaged(fl, rack_state)
    fl.result(t)
    rep = fl.promote()
    assert fl.state(t) == back_to
    assert rep.promoted.get("tray_returned") == 1
    assert fl.last_move(t)["reason"] == ("newer passing certification after the finding "
                                         "that triaged it")


def test_a_triaged_tray_waits_without_a_newer_pass(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.result(tray(R1, 4), run="run-0")
    fl.finding(f"{tray(R1, 4)}/gpu0")
    fl.apply()
    rep = fl.promote()
    assert fl.state(tray(R1, 4)) == "triage" and "tray_returned" not in rep.promoted
    assert rep.promoted == {"rack_degraded": 1}


def test_an_operators_triage_waits_for_the_operator(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(tray(R1, 4), "triage")
    fl.result(tray(R1, 4))
    rep = fl.promote()
    assert fl.state(tray(R1, 4)) == "triage" and rep.promoted == {"rack_degraded": 1}


def cordoned(fl: Fleet, **kw: Any) -> None:
    fl.rack(R1, "production", trays="production", **kw)
    fl.finding(f"{R1}/s01", kind="nvlink_switch_down")
    fl.apply()
    assert fl.state(R1) == "draining"


def test_a_rack_cordoned_on_a_finding_returns_on_a_newer_pass(fl: Fleet) -> None:
    cordoned(fl)
    fl.result(R1)
    rep = fl.promote()
    assert fl.state(R1) == "production" and rep.promoted == {"rack_returned": 1}
    assert fl.last_move(R1)["reason"] == ("newer passing certification after the finding that "
                                          "cordoned it")


def test_a_cordoned_rack_waits_without_a_newer_pass(fl: Fleet) -> None:
    cordoned(fl)
    rep = fl.promote()
    assert fl.state(R1) == "draining" and rep.promoted == {}


def test_a_cordoned_rack_with_a_coolant_fault_stays_out(fl: Fleet) -> None:
    cordoned(fl, fault_tier=1)
    fl.result(R1)
    assert fl.promote().promoted == {} and fl.state(R1) == "draining"


def test_a_cordoned_rack_with_too_many_trays_out_stays_out(fl: Fleet) -> None:
    cordoned(fl)
    for n in (1, 2, 3):
        fl.put(tray(R1, n), "repair")
    fl.result(R1)
    assert fl.promote().promoted == {} and fl.state(R1) == "draining"


def test_a_cordoned_rack_at_the_tray_limit_returns_degraded(fl: Fleet) -> None:
    cordoned(fl)
    fl.put(tray(R1, 1), "repair")
    fl.put(tray(R1, 2), "repair")
    fl.result(R1)
    rep = fl.promote()
    assert rep.promoted == {"rack_returned": 1, "rack_degraded": 1}
    assert fl.state(R1) == "degraded"


def test_an_operators_drain_and_an_escalation_wait_for_the_operator(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(R1, "draining")
    fl.rack(R2, "production", trays="production")
    for n in (1, 2, 3):
        fl.finding(f"{tray(R2, n)}/gpu0")
    assert fl.apply().racks_escalated == [R2]
    for t in (tray(R2, n) for n in (1, 2, 3)):
        fl.put(t, "repair")
    fl.result(R1)
    fl.result(R2)
    rep = fl.promote()
    assert fl.state(R1) == "draining" and fl.state(R2) == "draining"
    assert rep.promoted == {}


@pytest.mark.parametrize(("bad", "to"), [(0, "production"), (1, "degraded"), (2, "degraded"),
                                         (3, "production")])
def test_a_production_rack_degrades_with_tolerated_trays_out(fl: Fleet, bad: int,
                                                             to: str) -> None:
    fl.rack(R1, "production", trays="production")
    for n in range(1, bad + 1):
        fl.put(tray(R1, n), "repair")
    rep = fl.promote()
    assert fl.state(R1) == to
    assert rep.promoted == ({"rack_degraded": 1} if to == "degraded" else {})
    if to == "degraded":
        noun = "tray" if bad == 1 else "trays"
        assert fl.last_move(R1)["reason"] == (f"{bad} {noun} out (<= 2 tolerated by jobs on "
                                              "its NVLink domain)")


@pytest.mark.parametrize(("bad", "tier", "verdict", "to"), [
    (0, 0, "pass", "production"), (1, 0, "pass", "degraded"), (0, 1, "pass", "degraded"),
    (0, 0, "fail", "degraded"), (0, 0, None, "degraded")])
def test_a_degraded_rack_returns_when_every_tray_is_back(fl: Fleet, bad: int, tier: int,
                                                         verdict: str | None, to: str) -> None:
    fl.rack(R1, "degraded", trays="production", fault_tier=tier)
    for n in range(1, bad + 1):
        fl.put(tray(R1, n), "repair")
    if verdict is not None:
        fl.result(R1, verdict)
    rep = fl.promote()
    assert fl.state(R1) == to
    assert rep.promoted == ({"rack_returned": 1} if to == "production" else {})
    if to == "production":
        assert fl.last_move(R1)["reason"] == "every tray back in service"


def test_a_rack_the_topology_lacks_tolerates_the_default(fl: Fleet) -> None:
    now = repository.datetime.now(repository.UTC)
    with fl.store.session() as s:
        s.add(LifecycleRow(component_id="gone/r9", machine="rack", rack="gone/r9",
                           state="production", seq=1, goal=None, fault_since=None,
                           fault_tier=0, updated=now))
        for n in (1, 2):
            s.add(LifecycleRow(component_id=f"gone/r9/c0{n}", machine="tray", rack="gone/r9",
                               state="repair", seq=1, goal=None, fault_since=None,
                               fault_tier=0, updated=now))
    rep = fl.promote()
    assert rep.promoted == {"rack_degraded": 1} and fl.state("gone/r9") == "degraded"


def test_promote_passing_adds_to_a_given_report_and_is_idempotent(fl: Fleet) -> None:
    fl.rack(R1, "burn_in", trays="burn_in")
    fl.rack(R2, "production", trays="production")
    fl.finding(f"{tray(R2, 4)}/gpu0")
    fl.result(R1)
    rep = fl.apply()
    assert fl.promote(report=rep) is rep
    assert rep.promoted == {"rack_certified": 1, "rack_production": 1, "tray_production": 18,
                            "rack_degraded": 1}
    snap = fl.snapshot()
    again = fl.promote()
    assert again.promoted == {} and fl.snapshot() == snap


@pytest.mark.parametrize("out", ["received", "cabled", "cooling_verified", "powered",
                                 "firmware", "maintenance", "isolated", "rma", "retired"])
def test_a_pass_moves_no_rack_outside_the_promotion_paths(fl: Fleet, out: str) -> None:
    fl.rack(R1, out, trays="burn_in", finding_seq=1)  # as if evidence had pulled it
    fl.rack(R2, out, trays="burn_in", finding_seq=1)  # the same, with a tray out
    fl.put(tray(R2, 1), "repair")
    fl.result(R1)
    fl.result(R2)
    assert fl.promote().promoted == {} and (fl.state(R1), fl.state(R2)) == (out, out)


def test_an_operators_triage_does_not_hold_back_a_finding_triage(fl: Fleet) -> None:
    fl.rack(R1, "production", trays="production")
    fl.put(tray(R1, 2), "triage")  # the operator's, listed first
    fl.finding(f"{tray(R1, 5)}/gpu0")
    fl.apply()
    fl.result(tray(R1, 2))
    fl.result(tray(R1, 5))
    rep = fl.promote()
    assert fl.state(tray(R1, 2)) == "triage" and fl.state(tray(R1, 5)) == "production"
    assert rep.promoted == {"tray_returned": 1, "rack_degraded": 1}


def test_an_hgx_rack_does_not_stop_the_escalation_of_the_racks_after_it(fl: Fleet) -> None:
    fl.rack(H1, "production", trays="production")
    fl.rack(R1, "production", trays="production")
    fl.finding(f"{tray(H1, 1)}/gpu0")  # a/h1 sorts before a/r1
    for n in (1, 2, 3):
        fl.finding(f"{tray(R1, n)}/gpu0")
    rep = fl.apply()
    assert rep.racks_escalated == [R1] and fl.state(H1) == "production"


def test_options_are_keyword_only(fl: Fleet) -> None:
    with pytest.raises(TypeError):
        apply_findings(fl.store, TOPO, 0)  # type: ignore[misc]
    with pytest.raises(TypeError):
        promote_passing(fl.store, TOPO, "me")  # type: ignore[misc]
