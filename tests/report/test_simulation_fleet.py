"""The report's goodput rests on a simulation of its own fleet: another fleet's simulate.run is
never applied silently, and what was applied is said (terminal, report.json, report.html)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology
from rackscale.report import validate_document
from rackscale.store import Store

from .events import simulate

runner = CliRunner()
OTHER = "name: other-fleet\nregions:\n  - name: x\n    racks: [{template: hgx-h100, count: 2}]\n"
MIXED = ("name: seed-504\nregions:\n  - name: us-east\n    racks: [{template: vr-nvl72, "
         "count: 4}, {template: hgx-h100, count: 1}]\n")


def _simulate_other(store: Store, tmp_path: Path, text: str = OTHER, *args: str) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text)
    r = runner.invoke(app, ["simulate", "run", "--fleet", str(spec), "--days", "2", "--trials",
                            "5", "--record", "--db", store.url, *args])
    assert r.exit_code == 0, r.output


def _build(store: Store, tmp_path: Path) -> tuple[str, dict, str]:
    out = tmp_path / "rep"
    r = runner.invoke(app, ["report", "build", "--db", store.url, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return (" ".join(r.output.split()), json.loads((out / "report.json").read_text()),
            (out / "report.html").read_text())


def test_another_fleets_simulation_is_not_applied_and_says_so(fleet_store: Store,
                                                              tmp_path: Path) -> None:
    _simulate_other(fleet_store, tmp_path)
    terminal, doc, html = _build(fleet_store, tmp_path)
    goodput = doc["ledger"][-1]
    assert goodput["basis"] == "not_run" and goodput["reason"] == "simulate_other_fleet"
    assert goodput["count"] == doc["ledger"][-2]["count"]  # carried through, not scaled
    (warning,) = [w for w in doc["warnings"] if "simulate.run" in w]
    assert "'other-fleet', not of 'seed-504'" in warning
    assert "warning: the newest simulate.run" in terminal and "other-fleet" in terminal
    assert "other-fleet" in html and "not of" in html
    validate_document(doc)


def test_own_simulation_is_used_when_a_newer_one_is_of_another_fleet(
        fleet_store: Store, topo: Topology, tmp_path: Path) -> None:
    simulate(fleet_store, topo)  # seed-504's own, then another fleet's
    _simulate_other(fleet_store, tmp_path)
    _, doc, _ = _build(fleet_store, tmp_path)
    goodput = doc["ledger"][-1]
    assert goodput["basis"] == "simulated" and goodput["provenance"]["run_id"] == "sim-0001"
    assert any("is of fleet 'other-fleet'" in w and "the latest one of seed-504" in w
               for w in doc["warnings"])


def test_a_pool_or_another_version_of_the_fleet_is_flagged(fleet_store: Store,
                                                           tmp_path: Path) -> None:
    # Same name, other racks: the simulation counted other GPUs, and ran on one pool only.
    _simulate_other(fleet_store, tmp_path, MIXED)
    _, doc, _ = _build(fleet_store, tmp_path)
    assert doc["ledger"][-1]["basis"] == "simulated"
    text = " | ".join(doc["warnings"])
    assert "counted 320 GPUs in fleet 'seed-504'; the loaded spec has 504" in text
    assert "ran its job on pool vr-nvl72 (288 of 320 GPUs)" in text
