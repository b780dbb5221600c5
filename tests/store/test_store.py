"""Store round trips on SQLite and a real PostgreSQL server; idempotent and diffing loads."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology, parse_fleet, seed_fleet
from rackscale.store import Store, StoreError, load_topology


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s = Store(f"sqlite:///{tmp_path}/sub/dir/rackscale.db")
    else:
        base = request.getfixturevalue("postgres_url")
        # one fresh database per test, so tests never see each other's rows
        name = f"t_{uuid.uuid4().hex[:12]}"
        admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text(f"CREATE DATABASE {name}"))
        admin.dispose()
        s = Store(base.rsplit("/", 1)[0] + "/" + name)
    yield s
    s.close()


def test_component_round_trip(store: Store, seed_topo: Topology) -> None:
    res = load_topology(store, seed_topo)
    assert res.changed and res.components_added == len(seed_topo)
    assert len(res.racks_added) == 7
    counts = store.counts_by_kind()
    assert counts["gpu"] == 504 and counts["cdu"] == 7 and counts["rack"] == 7
    gpu = store.require_component("us-west/r02/c11/gpu3")
    assert (gpu.kind, gpu.parent, gpu.region, gpu.rack, gpu.sku) == (
        "gpu", "us-west/r02/c11", "us-west", "us-west/r02", "rubin")
    assert gpu.attributes == {"slot": 3}
    cdu = store.require_component("us-east/r01/cdu")
    assert cdu.attributes == {"required_flow_lpm": 271.7}
    assert store.count_components(kind="gpu", scope="us-east/r04") == 72
    assert [c.id for c in store.components(kind="nic", scope="us-east/r01/c01")] == [
        f"us-east/r01/c01/nic{k}" for k in range(4)]
    with pytest.raises(StoreError, match="unknown component id"):
        store.require_component("us-east/r99")


def test_event_log_round_trip_and_append_only(store: Store) -> None:
    t = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    a = store.append_event("us-east/r01", "lifecycle.transition", {"from": "cabled",
                           "to": "cooling_verified"}, actor="ops", reason="flow 280 L/min",
                           time=t)
    b = store.append_event("us-east/r01/c01", "certify.result", {"verdict": "pass"})
    assert b > a
    evs = store.events(prefix="us-east/r01")
    assert [e.seq for e in evs] == [a, b]
    first = evs[0]
    assert first.time == t and first.time.tzinfo is not None
    assert (first.payload, first.actor, first.reason) == (
        {"from": "cabled", "to": "cooling_verified"}, "ops", "flow 280 L/min")
    assert [e.kind for e in store.events(kind_prefix="certify.")] == ["certify.result"]
    assert store.events(component_id="us-east/r01") == [first]
    assert store.events(after_seq=a) == [evs[1]]
    # The database itself refuses to rewrite history.
    for stmt in ("UPDATE events SET reason = 'x'", "DELETE FROM events"):
        with pytest.raises(DBAPIError, match="append-only"), store.session() as s:
            s.execute(text(stmt))
    assert store.count_events() == 2


def test_load_is_idempotent(store: Store, seed_topo: Topology) -> None:
    load_topology(store, seed_topo)
    n_events = store.count_events()
    again = load_topology(store, seed_topo)
    assert not again.changed
    assert again.racks_added == [] and again.components_added == 0
    assert store.count_events() == n_events  # nothing written


def test_changed_spec_prints_and_applies_difference(store: Store) -> None:
    load_topology(store, Topology.build(seed_fleet()))
    changed = parse_fleet("""\
name: seed-504
regions:
  - name: us-east
    racks: [{template: vr-nvl72, count: 5}]
  - name: us-west
    racks: [{template: vr-nvl72, count: 2}]
""")
    res = load_topology(store, Topology.build(changed))
    assert res.racks_added == ["us-east/r05"]
    assert res.racks_removed == ["us-west/r03"]
    assert store.count_components(kind="gpu") == 504
    assert store.component("us-west/r03/c01/gpu0") is None
    assert store.component("us-east/r05/c18/gpu3") is not None
    kinds = [e.kind for e in store.events(kind_prefix="fleet.rack")]
    assert sorted(kinds) == ["fleet.rack_added"] * 8 + ["fleet.rack_removed"]


def test_template_change_updates_rows(store: Store) -> None:
    a = "name: f\nregions:\n  - name: x\n    racks: [{template: gb200-nvl72, count: 1}]\n"
    load_topology(store, Topology.build(parse_fleet(a)))
    res = load_topology(store, Topology.build(parse_fleet(a.replace("gb200", "gb300"))))
    assert res.components_changed > 0 and res.racks_added == []
    assert store.require_component("x/r01/c01/gpu0").sku == "gb300"


def test_cli_load_reports_difference(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/inv.db"
    spec = tmp_path / "f.yaml"
    spec.write_text("name: f\nregions:\n  - name: x\n    racks: [{template: vr-nvl72, count: 1}]\n")
    r = CliRunner().invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db])
    assert r.exit_code == 0 and "+ rack x/r01" in r.output
    r = CliRunner().invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db])
    assert "no change" in r.output
    spec.write_text(spec.read_text().replace("count: 1", "count: 2"))
    r = CliRunner().invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db, "--json"])
    assert r.exit_code == 0 and '"racks_added": [\n    "x/r02"\n  ]' in r.output


def test_bad_urls() -> None:
    with pytest.raises(StoreError, match="unsupported database"):
        Store("mysql://x@localhost/db")
    with pytest.raises(StoreError, match="cannot parse"):
        Store("not a url")
    with pytest.raises(StoreError, match="cannot open database"):
        Store("postgresql+psycopg://nobody@127.0.0.1:1/none")


def test_spec_only_change_reaches_the_fleet_row(store: Store) -> None:
    """A new power budget changes no component row, but lifecycle reads the budget from the
    stored spec: the load must update it (and log it), not report "no change"."""
    from sqlalchemy import select

    from rackscale.store import FleetRow

    load_topology(store, Topology.build(seed_fleet()))
    spec = seed_fleet()
    budgeted = spec.model_copy(update={"regions": [
        spec.regions[0].model_copy(update={"power_budget_kw": 500.0}), *spec.regions[1:]]})
    res = load_topology(store, Topology.build(budgeted))
    assert res.changed and res.spec_changed and res.components_changed == 0
    with store.session() as s:
        spec = s.scalars(select(FleetRow)).one().spec
    assert spec["regions"][0]["power_budget_kw"] == 500.0
    assert store.events(kind="fleet.loaded", newest_first=True)[0].payload["spec_changed"]
    assert not load_topology(store, Topology.build(budgeted)).changed


def test_event_payloads_and_times_read_back_exactly(store: Store) -> None:
    """The bulk read (payloads decoded in one pass, SQLite times from their text) gives back
    what was written: nested values, unicode, floats, infinities, empty payloads, times to
    the microsecond, aware in UTC, whatever zone they were written in."""
    from datetime import timedelta, timezone

    t0 = datetime(2026, 11, 29, 23, 59, 59, 123456, tzinfo=timezone(timedelta(hours=-5)))
    payloads = [
        {"verdict": "pass", "stages_passed": [1, 2, 3, 4], "note": "Düsseldorf ✓ \"q\" ,]"},
        {"verdict": "fail", "nested": {"a": [{"b": None}, 1.5e-9, -0.0, 10**15]}},
        {"verdict": "not_run", "n": -7},
        {"verdict": "pass"},
    ]
    seqs = [store.append_event(f"us-east/r01/c{i:02d}", "certify.result", p,
                               time=t0 + timedelta(microseconds=i), actor="t", reason=f"r{i}")
            for i, p in enumerate(payloads)]
    seqs.append(store.append_event("us-east/r01", "fleet.rack_removed", {},
                                   time=datetime(2026, 1, 1, tzinfo=UTC)))
    extra = []
    if store.dialect == "sqlite":
        # JSON has no infinity; SQLite keeps Python's `Infinity` (a job that never failed),
        # PostgreSQL's json type refuses it on write
        extra = [{"rule": "r", "action": "hold", "mttf_h": float("inf")}]
        seqs.append(store.append_event("us-east/r01", "lifecycle.interlock", extra[0]))
    evs = store.events()
    assert [e.seq for e in evs] == seqs
    assert [e.payload for e in evs] == [*payloads, {}, *extra]
    evs = evs[:5]
    for i, e in enumerate(evs[:-1]):
        assert e.time == t0 + timedelta(microseconds=i)
        assert e.time.utcoffset() == timedelta(0)
        assert (e.actor, e.reason, e.component_id) == ("t", f"r{i}", f"us-east/r01/c{i:02d}")
    assert evs[-1].time == datetime(2026, 1, 1, tzinfo=UTC) and evs[-1].payload == {}
    assert [e.seq for e in store.latest_events("certify.result")] == seqs[:4]
    assert store.events_with("certify.result", "verdict", "fail") == [evs[1]]
