"""The lifecycle repository's rules, one decision per test (what `make mutation` scores
lifecycle/repository.py against): enrollment, the state row and its event moved together,
the compare-and-set, the evidence gate's floor (the last repair), goals, cursors and counts."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rackscale.errors import UserError
from rackscale.fleet import FleetSpec, Topology
from rackscale.lifecycle import repository
from rackscale.lifecycle.repository import (
    NOTED,
    TRANSITION,
    EvidenceMissing,
    LifecycleRow,
    StaleState,
    Transition,
    UnknownLifecycleComponent,
)
from rackscale.lifecycle.states import IllegalTransition
from rackscale.store import Kind, Store, load_topology

SPEC = FleetSpec.model_validate({"name": "repo", "regions": [
    {"name": "a", "racks": [{"template": "gb200-nvl72", "names": ["r1", "r2"]},
                            {"template": "hgx-h100", "names": ["h1"]}]}]})
TOPO = Topology.build(SPEC)
# a/h1 sorts before a/r1 and a/r2 after it: a comparison turned into an order shows.
R1, R2, H1 = "a/r1", "a/r2", "a/h1"
T1 = f"{R1}/c03"


@pytest.fixture(scope="module")
def enrolled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The fleet loaded and enrolled once (with what enroll returned); each test gets a
    copy (seconds per scorer run)."""
    path = tmp_path_factory.mktemp("repo") / "enrolled.db"
    store = Store(f"sqlite:///{path}")
    load_topology(store, TOPO)
    repository.open_store(store)
    n = repository.enroll(store, TOPO)
    store.close()
    return path, n


@pytest.fixture
def store(tmp_path: Path, enrolled: tuple[Path, int]) -> Iterator[Store]:
    shutil.copy(enrolled[0], tmp_path / "repo.db")
    st = Store(f"sqlite:///{tmp_path / 'repo.db'}")
    yield st
    st.close()


def move(store: Store, cid: str, *path: str, **kw: Any) -> int:
    """Walk `cid` along `path` with legal transitions; the seq of the last move."""
    seq = 0
    for to in path:
        seq = repository.transition(store, cid, to, actor="t", reason="step", **kw).seq
    return seq


def passed(store: Store, cid: str, run: str = "run-2") -> int:
    return store.append_event(cid, Kind.CERTIFY_RESULT, {
        "run_id": run, "backend": "twin", "verdict": "pass"})


TO_BURN_IN = ("cabled", "cooling_verified", "powered", "firmware", "burn_in")


def trays_in(rack: str) -> list[str]:
    r = next(r for r in TOPO.racks if r.id == rack)
    return [TOPO.ids[j] for j in range(r.first, r.end) if TOPO.kinds[j] in ("compute_tray",
                                                                            "node")]


# ------------------------------------------------------------------------------- enroll
def test_enrolling_gives_every_rack_received_and_every_tray_or_node_onboard(
        store: Store, enrolled: tuple[Path, int]) -> None:
    nvl_trays, nodes = len(trays_in(R1)), len(trays_in(H1))
    assert nvl_trays == 18 and nodes >= 1
    assert repository.counts(store) == {"rack": {"received": 3},
                                        "tray": {"onboard": 2 * nvl_trays + nodes}}
    assert enrolled[1] == 3 + 2 * nvl_trays + nodes


def test_an_enrolled_row_points_at_its_enrollment_event(store: Store) -> None:
    row = repository.state_of(store, T1)
    [ev] = store.events(component_id=T1, kind=TRANSITION)
    assert (row.machine, row.rack, row.state, row.seq) == ("tray", R1, "onboard", ev.seq)
    assert (row.goal, row.fault_since, row.fault_tier) == (None, None, 0)
    assert ev.payload == {"from": None, "to": "onboard"}
    assert (ev.actor, ev.reason) == ("rackscale", "enrolled from inventory")
    assert repository.state_of(store, R1).machine == "rack"


def test_enrolling_again_enrolls_nothing_and_writes_nothing(store: Store) -> None:
    before = store.count_events()
    assert repository.enroll(store, TOPO) == 0
    assert store.count_events() == before


def test_an_unknown_component_is_refused_by_name(store: Store) -> None:
    with pytest.raises(UnknownLifecycleComponent, match="'a/r9'"):
        repository.state_of(store, "a/r9")


def test_trays_of_a_rack_are_its_own_trays_by_id(store: Store) -> None:
    got = [r.component_id for r in repository.trays_of(store, R1)]
    assert got == sorted(trays_in(R1)) and all(r.machine == "tray"
                                               for r in repository.trays_of(store, R1))


# ----------------------------------------------------------------------- last repair
def test_enrollment_is_not_a_repair(store: Store) -> None:
    with store.session() as s:
        assert repository.last_repair_seq(store, s, repository.get_row(s, R1)) == 0
        assert repository.last_repair_seq(store, s, repository.get_row(s, T1)) == 0


def test_a_racks_last_repair_is_its_newest_move_into_a_rack_repair_state(store: Store) -> None:
    move(store, R1, "cabled", "maintenance")
    second = move(store, R1, "cabled", "maintenance")
    move(store, R1, "cabled")  # a later move out of repair is not a repair
    with store.session() as s:
        assert repository.last_repair_seq(store, s, repository.get_row(s, R1)) == second


def test_a_trays_last_repair_is_its_move_into_a_tray_repair_state(store: Store) -> None:
    seq = move(store, T1, "seatrial", "triage")
    move(store, T1, "repair", "burn_in")
    with store.session() as s:
        assert repository.last_repair_seq(store, s, repository.get_row(s, T1)) == seq + 1


# ------------------------------------------------------------------------- evidence
def test_without_a_loaded_fleet_there_is_no_evidence_to_move_on(tmp_path: Path) -> None:
    bare = Store(f"sqlite:///{tmp_path / 'bare.db'}")
    try:
        repository.open_store(bare)
        with pytest.raises(EvidenceMissing, match="no fleet loaded"):
            repository.fleet_state(bare)
    finally:
        bare.close()


def test_a_pass_newer_than_the_last_repair_is_the_evidence(store: Store) -> None:
    move(store, R1, "cabled", "maintenance", "cabled", *TO_BURN_IN[1:])
    seq = passed(store, R1)
    with store.session() as s:
        assert repository.passing_evidence(store, s, repository.get_row(s, R1)) == seq


def test_a_pass_older_than_the_last_repair_is_not_evidence(store: Store) -> None:
    passed(store, R1)
    move(store, R1, "cabled", "maintenance")
    with store.session() as s:
        row = repository.get_row(s, R1)
        assert repository.passing_evidence(store, s, row) is None
        why = repository.why_not_serving(store, s, row, repository.fleet_state(store))
    assert "older than its last repair" in why


def test_the_fleet_state_given_decides_not_a_fresh_read(store: Store) -> None:
    stale = repository.fleet_state(store)  # read before the pass
    passed(store, R1)
    with store.session() as s:
        assert repository.passing_evidence(store, s, repository.get_row(s, R1),
                                           stale) is None
    move(store, R1, *TO_BURN_IN)
    with pytest.raises(EvidenceMissing):
        repository.transition(store, R1, "certified", actor="t", reason="r", state=stale)


# ----------------------------------------------------------------------- transition
def test_a_move_updates_the_row_and_logs_its_event_together(store: Store) -> None:
    t = repository.transition(store, R1, "cabled", actor="op", reason="cables in")
    assert t == Transition(R1, "rack", "received", "cabled", t.seq)
    row = repository.state_of(store, R1)
    assert (row.state, row.seq) == ("cabled", t.seq)
    ev = store.events(component_id=R1, kind=TRANSITION)[-1]
    assert (ev.seq, ev.payload, ev.actor, ev.reason) == (
        t.seq, {"from": "received", "to": "cabled"}, "op", "cables in")
    # its neighbours (sorting before and after it) did not move
    assert repository.state_of(store, H1).state == repository.state_of(store, R2).state \
        == "received"


def test_a_move_needs_a_reason(store: Store) -> None:
    before = store.count_events()
    with pytest.raises(UserError, match="needs a reason"):
        repository.transition(store, R1, "cabled", actor="op", reason="  ")
    assert store.count_events() == before and repository.state_of(store, R1).state == \
        "received"


def test_a_move_inside_the_callers_session_commits_with_it(store: Store) -> None:
    with store.session() as s:
        t = repository.transition(store, R1, "cabled", actor="op", reason="r", session=s)
        assert repository.get_row(s, R1).state == "cabled"
    assert repository.state_of(store, R1).seq == t.seq


def test_an_illegal_move_is_refused(store: Store) -> None:
    with pytest.raises(IllegalTransition):
        repository.transition(store, R1, "production", actor="op", reason="r")


@pytest.mark.parametrize("expect", ["cabled", "rma"])  # sorting before and after "received"
def test_a_move_expecting_another_state_changes_nothing(store: Store, expect: str) -> None:
    before = store.count_events()
    with pytest.raises(StaleState, match=f"is received, not {expect}"):
        repository.transition(store, R1, "cabled", actor="op", reason="r", expect=expect)
    assert store.count_events() == before


def test_a_move_expecting_the_current_state_goes_ahead(store: Store) -> None:
    t = repository.transition(store, R1, "cabled", actor="op", reason="r", expect="received")
    assert t.dst == repository.state_of(store, R1).state == "cabled"


@pytest.mark.parametrize("other", ["cabled", "rma"])  # sorting before and after "received"
def test_a_row_moved_by_another_writer_since_the_read_is_not_moved_again(
        store: Store, other: str) -> None:
    with pytest.raises(StaleState, match="changed concurrently"), store.session() as s:
        held = repository.get_row(s, R1)  # read: received (held: the session keeps it)
        repository.transition(store, R1, other, actor="b", reason="r")  # another writer
        assert held.state == "received"
        repository.transition(store, R1, "rma", actor="a", reason="r", session=s)
    assert repository.state_of(store, R1).state == other
    assert [e.payload["to"] for e in store.events(component_id=R1, kind=TRANSITION)] == [
        "received", other]


def test_production_needs_passing_evidence(store: Store) -> None:
    move(store, R1, *TO_BURN_IN)
    with pytest.raises(EvidenceMissing, match="cannot become certified"):
        repository.transition(store, R1, "certified", actor="op", reason="r")


def test_a_gated_move_records_its_evidence(store: Store) -> None:
    move(store, R1, *TO_BURN_IN)
    seq = passed(store, R1)
    t = repository.transition(store, R1, "certified", actor="op", reason="r",
                              extra={"note": "x"})
    ev = store.events(component_id=R1, kind=TRANSITION)[-1]
    assert ev.seq == t.seq and ev.payload == {"from": "burn_in", "to": "certified",
                                              "evidence_seq": seq, "note": "x"}


def test_an_ungated_move_carries_only_its_extra(store: Store) -> None:
    repository.transition(store, R1, "cabled", actor="op", reason="r", extra={"note": "x"})
    assert store.events(component_id=R1, kind=TRANSITION)[-1].payload == {
        "from": "received", "to": "cabled", "note": "x"}


def test_a_transition_record_is_immutable() -> None:
    t = Transition(R1, "rack", "received", "cabled", 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.seq = 8  # type: ignore[misc]


# --------------------------------------------------------- goals, history, cursors, counts
def test_a_goal_is_set_on_each_part_named_and_cleared_with_none(store: Store) -> None:
    repository.set_goal(store, [R1, R2], "production")
    assert [repository.state_of(store, c).goal for c in (R1, R2, H1)] == [
        "production", "production", None]
    repository.set_goal(store, [R1], None)
    assert repository.state_of(store, R1).goal is None


def test_history_is_the_parts_lifecycle_events_oldest_first(store: Store) -> None:
    move(store, R1, "cabled")
    store.append_event(R1, NOTED, {"finding_seq": 1}, actor="t", reason="r")
    passed(store, R1)  # not a lifecycle event
    move(store, R2, "cabled")  # another part's
    assert [(e["kind"], e["payload"].get("to")) for e in repository.history(store, R1)] == [
        (TRANSITION, "received"), (TRANSITION, "cabled"), (NOTED, None)]
    with pytest.raises(UnknownLifecycleComponent):
        repository.history(store, "a/r9")


def test_a_cursor_starts_at_zero_and_keeps_what_was_set(store: Store) -> None:
    with store.session() as s:
        assert repository.cursor(s, "findings") == 0
        repository.set_cursor(s, "findings", 5)
    with store.session() as s:
        assert repository.cursor(s, "findings") == 5
        repository.set_cursor(s, "findings", 9)
    with store.session() as s:
        assert repository.cursor(s, "findings") == 9 and repository.cursor(s, "other") == 0


def test_counts_are_per_machine_and_state(store: Store) -> None:
    move(store, R1, "cabled")
    move(store, T1, "seatrial")
    n = len(trays_in(R1)) * 2 + len(trays_in(H1))
    assert repository.counts(store) == {"rack": {"received": 2, "cabled": 1},
                                        "tray": {"onboard": n - 1, "seatrial": 1}}


def test_lifecycle_rows_are_keyed_by_component(store: Store) -> None:
    with store.session() as s:
        assert s.get(LifecycleRow, R1) is not None


def test_enrollment_and_moves_take_their_options_by_name(store: Store) -> None:
    with pytest.raises(TypeError):
        repository.enroll(store, TOPO, "someone")  # type: ignore[misc]
    with pytest.raises(TypeError):
        repository.transition(store, R1, "cabled", "op", "r")  # type: ignore[misc]
    assert repository.state_of(store, R1).state == "received"


# ------------------------------------------------------------------------------ history
def test_each_lifecycle_event_says_its_change_in_a_few_words(store: Store) -> None:
    move(store, R1, "cabled")
    store.append_event(R1, Kind.LIFECYCLE_INTERLOCK, {"rule": "coolant_before_power",
                                                      "action": "hold"})
    store.append_event(R1, Kind.LIFECYCLE_SLURM, {"action": "drain", "node": "a-r1-c03"})
    store.append_event(R1, Kind.LIFECYCLE_NOTED, {"finding_seq": 3})
    got = [(e.kind, repository.moved(e), repository.change_of(e))
           for e in repository.history_events(store, R1)]
    assert got[-4:] == [
        (Kind.LIFECYCLE_TRANSITION, ("received", "cabled"), "received -> cabled"),
        (Kind.LIFECYCLE_INTERLOCK, (None, None), "coolant_before_power hold"),
        (Kind.LIFECYCLE_SLURM, (None, None), "drain"),
        (Kind.LIFECYCLE_NOTED, (None, None), "none")]
