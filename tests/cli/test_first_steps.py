"""What a new user meets first: a core install without extras, and commands that default to the
fleet loaded in the store."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from rackscale.cli import app

runner = CliRunner()


def _cli_without(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter where `module` cannot be imported (as after a core
    install without its extra), although it is installed here."""
    code = (f"import sys; sys.modules[{module!r}] = None; sys.argv = ['rackscale', *{args!r}]; "
            "from rackscale.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_probe_without_torch_names_the_extra(tmp_path: Path) -> None:
    res = _cli_without("torch", ["certify", "probe", "gemm"], tmp_path)
    assert res.returncode == 2, res.stderr
    assert "rackscale[torch]" in res.stderr
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr


def test_probe_without_torch_json_is_still_an_error(tmp_path: Path) -> None:
    res = _cli_without("torch", ["certify", "probe", "hbm", "--json"], tmp_path)
    assert res.returncode == 2
    assert "rackscale[torch]" in res.stderr + res.stdout
    if res.stdout.strip():  # a --json error object, where the CLI prints one
        json.loads(res.stdout)


SMALL = """\
name: lab-3
regions:
  - name: eu-north
    racks: [{template: vr-nvl72, count: 2}]
  - name: ap-south
    racks: [{template: vr-nvl72, count: 1}]
  - name: sa-east
    racks: [{template: vr-nvl72, count: 1}]
"""


def _loaded(tmp_path: Path) -> str:
    spec = tmp_path / "lab.yaml"
    spec.write_text(SMALL)
    db = f"sqlite:///{tmp_path / 'lab.db'}"
    r = runner.invoke(app, ["fleet", "load", "--fleet", str(spec), "--db", db])
    assert r.exit_code == 0, r.output
    return db


def test_fleet_commands_default_to_the_loaded_fleet(tmp_path: Path) -> None:
    db = _loaded(tmp_path)
    r = runner.invoke(app, ["fleet", "show", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["fleet"] == "lab-3" and shown["racks"] == 4
    r = runner.invoke(app, ["fleet", "path", "eu-north/r01/c01/gpu0", "sa-east/r01/c01/gpu0",
                            "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["fabric"] != "nvlink"
    r = runner.invoke(app, ["fleet", "affects", "eu-north/r02/s01", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["count"] == 72
    # the seed fleet's ids are unknown in this fleet: it is not used behind the user's back
    r = runner.invoke(app, ["fleet", "affects", "us-east/r01/s01", "--db", db])
    assert r.exit_code == 2 and "unknown component id" in r.output
    # --fleet still picks another fleet explicitly
    r = runner.invoke(app, ["fleet", "affects", "us-east/r01/s01", "--db", db, "--fleet",
                            "seed-504", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["count"] == 72


def test_simulate_and_certify_default_to_the_loaded_fleet(tmp_path: Path) -> None:
    db = _loaded(tmp_path)
    r = runner.invoke(app, ["simulate", "run", "--db", db, "--trials", "5", "--days", "2",
                            "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["fleet"] == "lab-3"
    r = runner.invoke(app, ["certify", "run", "--db", db, "--stages", "1", "--out",
                            str(tmp_path), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["gpus_total"] == 4 * 72


def test_checkpoint_tiers_follow_the_loaded_fleet(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = _loaded(tmp_path)
    r = runner.invoke(app, ["checkpoint", "ls", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    from rackscale.checkpoint import default_config

    cfg = default_config("rackscale-data", ["eu-north", "ap-south", "sa-east"])
    assert cfg.region.name == "eu-north"
    assert [t.name for t in cfg.replicas] == ["ap-south", "sa-east"]
    # what the command itself uses: its table names one column per tier
    r = runner.invoke(app, ["checkpoint", "ls", "--db", db], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for region in ("eu-north", "ap-south", "sa-east"):
        assert region in r.output
    assert "us-east" not in r.output and "us-west" not in r.output


def test_demo_has_one_meaning_of_healthy(tmp_path: Path) -> None:
    """A count called "healthy" means one thing in the demo's output: the certify step's
    count of GPUs outside every finding's blast radius has its own name."""
    env = {**os.environ, "COLUMNS": "100"}
    env.pop("RACKSCALE_DB", None)
    proc = subprocess.run([sys.executable, "-m", "rackscale", "demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    clear = re.search(r"GPUs clear of findings: (\d+)/504", out)
    assert clear is not None, out
    # a count labelled healthy: "healthy: 320/504", "healthy    344  ..." (not "healthy 72-GPU")
    healthy = {int(m.group(1)) for m in re.finditer(r"\bhealthy:?\s+(\d+)(?=/|\s)", out)}
    ledger = re.search(r"4\. healthy\s+(\d+)", out)
    assert ledger is not None, out
    assert healthy == {int(ledger.group(1))}, healthy
    assert int(clear.group(1)) != int(ledger.group(1))  # two counts, two names
    # the report is where the demo says, under the directory it ran in
    where = re.search(r"report: (\S+report\.html)", out.replace("\n", ""))
    assert where is not None and Path(where.group(1)) == \
        tmp_path / "rackscale-data" / "report" / "report.html"
    assert Path(where.group(1)).is_file()
