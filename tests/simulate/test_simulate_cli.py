"""The `rackscale simulate` commands, bad input (exit 2), and the demo step."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli.demo import DemoContext
from rackscale.cli.simulate import step_simulate
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store

runner = CliRunner()
SEED = ["--fleet", "seed-504"]  # with no fleet loaded, simulate needs --fleet
SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_run_json_says_simulated():
    res = runner.invoke(app, ["simulate", "run", *SEED, "--job-gpus", "288", "--days", "10",
                              "--trials", "20", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["simulated"] is True
    assert out["units_job"] == 4 and out["units_spare"] == 3
    assert 0 < out["ettr"]["mean"] <= 1
    assert set(out["goodput"]) == {"scheduling", "runtime", "program", "total"}


def test_run_table_output():
    res = runner.invoke(app, ["simulate", "run", *SEED, "--days", "5", "--trials", "10"])
    assert res.exit_code == 0, res.output
    assert "simulated" in res.output and "ETTR" in res.output and "goodput" in res.output


def test_sweep_writes_csv_and_png(tmp_path):
    res = runner.invoke(app, ["simulate", "sweep", *SEED, "--param", "ckpt-interval", "--values",
                              "10,30,90", "--days", "10", "--trials", "20", "--out",
                              str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    rows = list(csv.DictReader((tmp_path / "sweep-ckpt-interval.csv").open()))
    assert [float(r["value"]) for r in rows] == [10, 30, 90]
    assert all(r["simulated"] == "true" for r in rows)
    assert (tmp_path / "sweep-ckpt-interval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out["optimum"]["value"] in (10, 30, 90)
    assert out["daly_min"] > 0


@pytest.mark.parametrize(("args", "message"), [
    (["--job-gpus", "-8"], "job-gpus"),
    (["--trials", "-1"], "trials"),
    (["--job-gpus", "600"], "needs 9 NVLink domains"),
    (["--failure-model", "weibull"], "valid failure models: llama3, rsc-1, rsc-2"),
    (["--spare-domains", "5", "--job-gpus", "504"], "spare-domains 5"),
    (["--spare-trays", "18"], "spare-trays"),
])
def test_bad_input_exits_2_with_a_clear_message(args, message):
    res = runner.invoke(app, ["simulate", "run", *SEED, "--days", "1", "--trials", "2", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_bad_input_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "rackscale", "simulate", "run", *SEED,
                           "--job-gpus", "100000"], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "larger" in proc.stderr or "needs" in proc.stderr
    assert "Traceback" not in proc.stderr


def _ctx(tmp_path: Path) -> DemoContext:
    return DemoContext(topo=Topology.build(seed_fleet("seed-504")),
                       store=Store(f"sqlite:///{tmp_path}/demo.db"), seed=7, data_dir=tmp_path)


def test_demo_step_sizes_job_to_certified_capacity(tmp_path):
    from rackscale.cli.certify import step_certify
    from rackscale.cli.demo import step_fleet
    from rackscale.report import build_ledger, collect

    ctx = _ctx(tmp_path)
    step_fleet(ctx)
    step_certify(ctx)  # the real ladder on the twin with the shipped faults
    step_simulate(ctx)
    step = ctx.results.simulate
    assert step is not None and step.result is not None and step.skipped is None
    r = step.result
    certified = build_ledger(collect(ctx.store)).step("certified").count
    assert 0 < certified < 504  # the shipped faults leave some, not all, domains whole
    assert r.job_gpus == step.job_gpus == certified and r.job_gpus % 72 == 0
    events = list(ctx.store.events(kind="simulate.run"))
    assert len(events) == 1
    assert events[0].payload["simulated"] is True
    assert events[0].payload["ettr"]["mean"] == r.ettr.mean


def test_demo_step_without_certification_uses_whole_fleet(tmp_path):
    ctx = _ctx(tmp_path)
    step_simulate(ctx)
    step = ctx.results.simulate
    assert step is not None and step.result is not None
    assert step.job_gpus == step.result.job_gpus == 504


def test_sweep_of_spare_domains_reports_optimum_and_young_daly(tmp_path):
    res = runner.invoke(app, ["simulate", "sweep", *SEED, "--param", "spare-domains", "--values",
                              "0,1,3", "--job-gpus", "288", "--rate-scale", "5", "--days", "20",
                              "--trials", "30", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "optimum found: spare-domains = 3" in res.output
    assert "Young/Daly" in res.output
    assert (tmp_path / "sweep-spare-domains.png").stat().st_size > 10_000


def test_sweep_takes_the_options_run_takes(tmp_path):
    """docs/simulate.md: sweep takes the same options as run; they reach every point."""
    common = ["--days", "5", "--trials", "10", "--mfu", "0.5", "--straggler-slowdown", "2",
              "--straggler-detect", "10", "--repair-scale", "2", "--rack-repair", "6", "--json"]
    res = runner.invoke(app, ["simulate", "sweep", *SEED, "--param", "ckpt-interval", "--values",
                              "30", "--out", str(tmp_path), *common])
    assert res.exit_code == 0, res.output
    point = json.loads(res.stdout)["points"][0]
    single = json.loads(runner.invoke(app, ["simulate", "run", *SEED, *common]).stdout)
    assert point["goodput"]["program"] <= 0.5
    assert point["ettr"] == single["ettr"] and point["goodput"] == single["goodput"]


@pytest.mark.parametrize(("args", "message"), [
    (["--param", "colour", "--values", "1"], "valid: ckpt-interval, spare-domains"),
    (["--param", "spare-domains", "--values", "1.5"], "whole numbers"),
    (["--param", "ckpt-interval", "--values", "10,-5"],
     "ckpt-interval-min: Input should be greater than 0 (got -5.0)"),
    (["--values", "ten"], "numbers separated by commas"),
])
def test_bad_sweep_input_exits_2(tmp_path, args, message):
    res = runner.invoke(app, ["simulate", "sweep", *SEED, "--days", "1", "--trials", "2", "--out",
                              str(tmp_path), *args])
    assert res.exit_code == 2, res.output
    assert message in res.output


def test_oversized_run_is_refused_before_allocating(tmp_path):
    fleet = tmp_path / "big.yaml"
    # max_gpus: past the default fleet-size cap on purpose, to reach the memory check
    fleet.write_text("name: big\nmax_gpus: 144000\nregions:\n  - name: a\n    racks: "
                     "[{template: vr-nvl72, count: 2000}]\n")
    res = runner.invoke(app, ["simulate", "run", "--fleet", str(fleet), "--trials", "5000"])
    assert res.exit_code == 2
    assert "too much memory" in res.output
