"""Loading a second fleet into a store never deletes the first unless told to (--replace)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import RACK, Topology, parse_fleet, seed_fleet
from rackscale.store import FleetMismatch, FleetRow, Store, load_topology

OTHER = "name: lab\nregions:\n  - name: eu\n    racks: [{template: gb200-nvl72, count: 1}]\n"
runner = CliRunner()


def test_other_fleet_is_refused_and_nothing_changes(sqlite_store: Store) -> None:
    seed = Topology.build(seed_fleet())
    load_topology(sqlite_store, seed)
    before = sqlite_store.count_components()
    with pytest.raises(FleetMismatch, match=r"holds fleet seed-504.*--replace"):
        load_topology(sqlite_store, Topology.build(parse_fleet(OTHER)))
    assert sqlite_store.count_components() == before
    assert len(sqlite_store.components(kind=RACK)) == 7
    assert sqlite_store.count_events("fleet.rack_removed") == 0


def test_replace_replaces_and_keeps_the_history(sqlite_store: Store) -> None:
    load_topology(sqlite_store, Topology.build(seed_fleet()))
    other = Topology.build(parse_fleet(OTHER))
    result = load_topology(sqlite_store, other, replace=True)
    assert len(result.racks_removed) == 7 and result.racks_added == ["eu/r01"]
    assert [r.id for r in sqlite_store.components(kind=RACK)] == ["eu/r01"]
    with sqlite_store.session() as s:
        assert [f.name for f in s.query(FleetRow)] == ["lab"]
    assert sqlite_store.count_events("fleet.loaded") == 2  # the old fleet's events stay


def test_same_fleet_reloads_without_replace(sqlite_store: Store) -> None:
    topo = Topology.build(seed_fleet())
    load_topology(sqlite_store, topo)
    assert not load_topology(sqlite_store, topo).changed


def test_cli_asks_for_replace(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    spec = tmp_path / "lab.yaml"
    spec.write_text(OTHER)
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    res = runner.invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db])
    assert res.exit_code == 2 and "--replace" in res.output
    assert Store(db).count_components(kind=RACK) == 7
    res = runner.invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db, "--replace"])
    assert res.exit_code == 0, res.output
    assert "- rack us-east/r01" in res.output and Store(db).count_components(kind=RACK) == 1
