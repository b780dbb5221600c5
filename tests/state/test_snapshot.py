"""The persisted fleet state is a cache of the log: over any random history of certification
results, findings (on trays, GPUs, racks' parts, leaves), lifecycle moves and twin plants, a
state started from a snapshot taken at any point and folded on equals the state folded from
the whole log; a snapshot of another fleet shape is never used."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.pg import fresh_database

from rackscale.fleet import FleetSpec, Topology
from rackscale.state import FleetState
from rackscale.state import snapshot as snap
from rackscale.store import (
    CertifyFindingV1,
    CertifyResultV1,
    Kind,
    LifecycleTransitionV1,
    Store,
    TwinPlantV1,
    load_topology,
)
from rackscale.store.events import PlantFault

SPEC = FleetSpec.model_validate({"name": "snap", "regions": [{"name": "r", "racks": [
    {"template": "gb200-nvl72", "count": 2}, {"template": "hgx-h100", "count": 1}]}]})
TOPO = Topology.build(SPEC)


def _parts() -> list[str]:
    out: list[str] = []
    for rack in TOPO.racks:
        tray = f"{rack.id}/{rack.template.tray_prefix()}01"
        out += [rack.id, tray, f"{tray}/gpu0", f"{rack.id}/ps1"]
    return [*out, TOPO.leaves[0]]


PARTS = _parts()
STATES = ["burn_in", "certified", "production", "draining", "triage", "repair"]
EVENTS = st.lists(st.one_of(
    st.tuples(st.just("result"), st.sampled_from(PARTS),
              st.sampled_from(["pass", "fail", "not_run"]), st.integers(0, 3)),
    st.tuples(st.just("finding"), st.sampled_from(PARTS), st.sampled_from(["fail", "warn"]),
              st.integers(0, 3)),
    st.tuples(st.just("move"), st.sampled_from(PARTS[:2] + PARTS[4:6]),
              st.sampled_from(STATES), st.booleans()),
    st.tuples(st.just("plant"), st.sampled_from(PARTS), st.booleans(), st.integers(0, 3))),
    min_size=1, max_size=40)


def _append(store: Store, op: tuple[Any, ...]) -> None:
    what, cid = op[0], op[1]
    if what == "result":
        store.append_event(cid, Kind.CERTIFY_RESULT, CertifyResultV1(
            verdict=op[2], run_id=f"run{op[3]}", backend="twin",
            findings=[cid] if op[2] == "fail" else None))
    elif what == "finding":
        store.append_event(cid, Kind.CERTIFY_FINDING, CertifyFindingV1(
            component=cid, kind="gpu_dead", stage=1, confidence=0.9, verdict=op[2],
            run_id=f"run{op[3]}", backend="twin"))
    elif what == "move":
        store.append_event(cid, Kind.LIFECYCLE_TRANSITION, LifecycleTransitionV1.model_validate(
            {"from": "burn_in" if op[3] else None, "to": op[2],
             "finding_seq": 1 if op[3] else None}))
    else:
        faults = [PlantFault(target=f"{cid}/cdu", kind="coolant_flow_low",
                             severity=0.5)] if op[2] else []
        store.append_event(SPEC.name, Kind.TWIN_PLANT, TwinPlantV1(faults=faults, seed=op[3]))


def _same(a: FleetState, b: FleetState) -> None:
    assert a.seq == b.seq
    for cid in PARTS:
        assert a.conditions(cid) == b.conditions(cid), cid
        assert a.failing(cid) == b.failing(cid), cid
        assert a.lifecycle.get(cid) == b.lifecycle.get(cid), cid
        assert a.entered.get(cid) == b.entered.get(cid), cid
    assert a.failing_parts() == b.failing_parts()
    assert json.dumps(a._encode(), sort_keys=True) == json.dumps(b._encode(), sort_keys=True)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(events=EVENTS, cut=st.integers(0, 40))
def test_a_state_from_a_snapshot_and_the_log_after_it_equals_the_whole_fold(
        events: list[tuple[Any, ...]], cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as monkeypatch:
        store = Store(f"sqlite:///{Path(tmp) / 's.db'}")
        load_topology(store, TOPO)
        cut = min(cut, len(events))
        for op in events[:cut]:
            _append(store, op)
        monkeypatch.setattr(FleetState, "SNAPSHOT_EVERY", 1)
        first = FleetState.load(store, TOPO)  # folds the log up to the cut, leaves a snapshot
        written = snap.read(store, TOPO)
        assert (written is not None) == (first.seq > 0)
        for op in events[cut:]:
            _append(store, op)
        monkeypatch.setattr(FleetState, "SNAPSHOT_EVERY", 10**9)
        from_snapshot = FleetState.load(store, TOPO)
        with monkeypatch.context() as m:  # no snapshot at all: the whole log, folded
            m.setattr(snap, "read", lambda *a, **k: None)
            whole = FleetState.load(store, TOPO)
        _same(from_snapshot, whole)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 's.db'}"
    return fresh_database(request.getfixturevalue("postgres_url"), "snap")


def test_a_snapshot_of_another_fleet_shape_or_past_the_asked_seq_is_not_used(
        db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(db_url)
    load_topology(store, TOPO)
    _append(store, ("result", PARTS[1], "fail", 1))
    monkeypatch.setattr(FleetState, "SNAPSHOT_EVERY", 1)
    at = FleetState.load(store, TOPO).seq
    assert snap.read(store, TOPO) is not None
    _append(store, ("result", PARTS[1], "pass", 2))
    # the fleet reloaded with one rack more: its ids and routes differ, the snapshot is stale
    bigger = Topology.build(FleetSpec.model_validate({"name": "snap", "regions": [
        {"name": "r", "racks": [{"template": "gb200-nvl72", "count": 3},
                                {"template": "hgx-h100", "count": 1}]}]}))
    assert snap.read(store, bigger) is None
    assert snap.read(store, TOPO, until_seq=at - 1) is None
    # a state asked for as it was at `at` folds the log to `at`, not the newer snapshot
    monkeypatch.setattr(FleetState, "SNAPSHOT_EVERY", 1)
    FleetState.load(store, TOPO)  # snapshot moves on to the pass
    old = FleetState.load(store, TOPO, until_seq=at)
    assert old.seq == at and not old.certification(PARTS[1]).ok  # type: ignore[union-attr]


def test_a_read_only_store_without_the_table_folds_the_log(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Store(url)
    load_topology(store, TOPO)
    _append(store, ("result", PARTS[1], "pass", 1))
    with store.engine.begin() as conn:  # a store written before snapshots existed
        conn.exec_driver_sql("DROP TABLE IF EXISTS state_snapshots")
    ro = Store(url, readonly=True)
    state = FleetState.load(ro, TOPO)
    assert state.certification(PARTS[1]) is not None
    assert snap.read(ro, TOPO) is None
