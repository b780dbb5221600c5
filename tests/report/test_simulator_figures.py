"""The report shows what the real simulator records (no hand-written events): the Young/Daly
interval of `simulate run --record` and the policy sweep of `simulate sweep --record`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.report import validate_document
from rackscale.store import Store

runner = CliRunner()


def _ok(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r.output


def test_report_shows_young_daly_and_sweep_of_real_runs(fleet_store: Store,
                                                        tmp_path: Path) -> None:
    db = fleet_store.url
    _ok(["simulate", "run", "--db", db, "--trials", "10", "--days", "5", "--record"])
    _ok(["simulate", "sweep", "--db", db, "--trials", "10", "--days", "5", "--values",
         "10,30,60", "--out", str(tmp_path / "sw"), "--record"])
    out = tmp_path / "rep"
    _ok(["report", "build", "--db", db, "--out", str(out)])
    html = (out / "report.html").read_text()
    doc = json.loads((out / "report.json").read_text())
    validate_document(doc)

    run = doc["simulation"]["payload"]
    assert run["young_min"] > 0 and run["daly_min"] > 0
    cell = re.search(r"Young / Daly interval \(min\)</th><td>([^<]*)<", html)
    assert cell is not None and "—" not in cell.group(1)
    assert cell.group(1) == f"{run['young_min']:.4g} / {run['daly_min']:.4g}"

    sweep = doc["sweep"]
    assert sweep["status"] == "ran" and sweep["payload"]["param"] == "ckpt-interval"
    assert [p["value"] for p in sweep["payload"]["points"]] == [10, 30, 60]
    assert 'id="sweep"' in html and 'src="data:image/png;base64,' in html
    assert "optimum" in re.search(r'<p id="sweep-optimum">([^<]*)', html).group(1)


def test_report_without_sweep_says_how_to_record_one(fleet_store: Store,
                                                     tmp_path: Path) -> None:
    out = tmp_path / "rep"
    _ok(["report", "build", "--db", fleet_store.url, "--out", str(out)])
    doc = json.loads((out / "report.json").read_text())
    assert doc["sweep"] == {"status": "not_run"}
    assert "simulate sweep --record" in (out / "report.html").read_text()
