"""The report's storage section: a recorded `simulate storage-whatif` shows what the cache and
replication buy, with measured and simulated figures labelled; without one it says how."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.report import build_report
from rackscale.report.document import validate_document
from rackscale.store import Store
from tests.simulate.test_storage import profile_dict

runner = CliRunner()


def test_recorded_whatif_is_the_storage_section(fleet_store: Store, tmp_path: Path) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(profile_dict()))
    r = runner.invoke(app, ["simulate", "storage-whatif", "--db", fleet_store.url, "--storage",
                            str(prof), "--ckpt-size", "2TB", "--trials", "20", "--intervals",
                            "10,30", "--gpu-hour-price", "2.5", "--record", "--json"])
    assert r.exit_code == 0, r.output
    whatif = json.loads(r.stdout)
    built = build_report(fleet_store, tmp_path / "rep")
    validate_document(built.doc)
    sec = built.doc["storage"]
    assert sec["status"] == "ran" and sec["gpu_hour_price"] == 2.5
    assert sec["buys_per_month"] == whatif["buys_per_month"]
    assert set(sec["setups"]) == {"cache+replication", "cache only", "replication only",
                                  "neither"}
    assert sec["measured"]["basis"].startswith("measured")
    assert sec["measured"]["figures"]["restore_region_s"] == whatif["storage"][
        "restore_region_s"]
    html = (tmp_path / "rep" / "report.html").read_text()
    assert 'id="storage-buys"' in html and "measured (real)" in html
    assert "replication (with local cache)" in html


def test_no_whatif_says_how_to_get_one(fleet_store: Store, tmp_path: Path) -> None:
    built = build_report(fleet_store, tmp_path / "rep")
    assert built.doc["storage"] == {"status": "not_run"}
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "no storage what-if recorded" in html and "checkpoint profile" in html


def test_the_hint_without_a_whatif_gives_commands_that_work_one_after_the_other(
        tmp_path: Path, monkeypatch) -> None:
    """`checkpoint profile --out` takes a directory: the hint's --storage file is the one it
    writes there (it said `--out profile.json`, which made a directory of that name)."""
    from rackscale.report.storage import render_storage

    html = render_storage({"status": "not_run"})
    assert "checkpoint profile --out rackscale-data`" in html
    assert "--storage rackscale-data/storage-profile.json" in html
    from rackscale.cli.storage import PROFILE_NAME

    assert PROFILE_NAME == "storage-profile.json"
