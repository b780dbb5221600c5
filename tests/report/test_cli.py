"""`rackscale report ...` through the CLI, and the demo's report step as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology
from rackscale.store import Store

from .events import SEED_FAULTS, certify, onboard, simulate

runner = CliRunner()


def test_build_show_validate(fleet_store: Store, topo: Topology, tmp_path: Path) -> None:
    onboard(fleet_store, topo)
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo)
    out = tmp_path / "rep"
    r = runner.invoke(app, ["report", "build", "--db", fleet_store.url, "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / "report.html").is_file() and (out / "report.json").is_file()
    assert "7. expected goodput" in r.output and "report.html" in r.output
    assert "72 domain_degraded:nvlink_switch_down" in r.output

    r = runner.invoke(app, ["report", "build", "--db", fleet_store.url, "--out", str(out),
                            "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["html"] == str(out / "report.html")

    r = runner.invoke(app, ["report", "show", "--db", fleet_store.url, "--json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert [s["count"] for s in shown["ledger"]] == [504, 504, 504, 430, 216, 216, 200.9]
    assert shown["ledger"][-1]["basis"] == "simulated"

    shapes = {s["name"]: s for s in shown["job_shapes"]}
    assert shapes["nvl72-domains-16of18-trays"]["certified_gpus"] == 5 * 64
    assert shapes["whole-nvl72-domains"]["headline"]

    r = runner.invoke(app, ["report", "show", "--db", fleet_store.url],
                      env={"COLUMNS": "160"})
    assert r.exit_code == 0 and "simulated (twin)" in r.output and "200.9" in r.output
    assert "* whole-nvl72-domains" in r.output and "nvl72-domains-16of18-trays" in r.output
    r = runner.invoke(app, ["report", "show", "--db", fleet_store.url, "--shape-gpus", "64",
                            "--json"])
    certified = json.loads(r.stdout)["ledger"][5]
    assert certified["lost"] == {"shape_remainder": 3 * 8}

    r = runner.invoke(app, ["report", "validate", str(out / "report.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((out / "report.json").read_text())
    doc["ledger"][0]["basis"] = "guessed"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    r = runner.invoke(app, ["report", "validate", str(tmp_path / "bad.json")])
    assert r.exit_code == 2 and "ledger/0/basis" in r.output

    r = runner.invoke(app, ["report", "schema"])
    assert json.loads(r.stdout)["title"] == "rackscale usable-capacity report"


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", "show", "--db", f"sqlite:///{tmp_path}/empty.db"])
    assert r.exit_code == 2
    assert "no fleet is loaded" in r.output and "rackscale demo" in r.output
    r = runner.invoke(app, ["report", "validate", str(tmp_path / "missing.json")])
    assert r.exit_code == 2 and "cannot read" in r.output


def test_demo_ends_with_the_report(tmp_path: Path) -> None:
    """End to end as a user runs it: a real process in a fresh directory."""
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[2] / "src"),
                        "COLUMNS": "120"}
    env.pop("RACKSCALE_DB", None)
    r = subprocess.run([sys.executable, "-m", "rackscale", "demo"], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    html = tmp_path / "rackscale-data" / "report" / "report.html"
    assert html.is_file()
    last = r.stdout.strip().splitlines()
    assert any(line.startswith("report: ") and line.endswith("report.html") for line in last)
    assert "headline GPUs ->" in r.stdout
    summary = " ".join(r.stdout[r.stdout.index("headline GPUs ->"):].split())
    doc_steps = {s["key"]: s for s in json.loads(
        html.with_name("report.json").read_text())["ledger"]}
    for key in ("certified", "goodput"):  # each figure says what it rests on
        basis = doc_steps[key]["basis"]
        assert (doc_steps[key]["note"] if basis == "not_run" else basis) in summary
    doc = json.loads(html.with_name("report.json").read_text())
    assert doc["fleet"]["headline_gpus"] == 504
