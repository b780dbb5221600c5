"""The CLI noun tree: help everywhere, JSON where output is data, version, demo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rackscale import __version__
from rackscale.cli import app

runner = CliRunner()


def _all_commands() -> list[list[str]]:
    root = typer.main.get_command(app)
    out: list[list[str]] = []

    def walk(cmd: object, path: list[str]) -> None:
        out.append(path)
        # typer vendors its own click, so test for the shape rather than a class
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    return out


@pytest.mark.parametrize("path", _all_commands(), ids=lambda p: " ".join(p) or "root")
def test_help_everywhere(path: list[str]) -> None:
    res = runner.invoke(app, [*path, "--help"])
    assert res.exit_code == 0, res.output
    assert "Usage" in res.output


def test_version() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"rackscale {__version__}"


def test_fleet_show_json() -> None:
    res = runner.invoke(app, ["fleet", "show", "--fleet", "seed-504", "--json"])
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert data["headline_gpus"] == 504 and data["totals"]["compute_tray"] == 126
    assert data["peak_bf16_pflops"] == pytest.approx(504 * 4.0)


def test_fleet_show_table_and_errors(tmp_path: Path) -> None:
    res = runner.invoke(app, ["fleet", "show", "--fleet", "seed-504"])
    assert res.exit_code == 0 and "headline GPUs: 504" in res.output
    res = runner.invoke(app, ["fleet", "show", "--fleet", "seed-9"])
    assert res.exit_code == 2 and "built-in fleets: seed-504" in res.output
    db = tmp_path / "none.db"
    res = runner.invoke(app, ["fleet", "show", "--db", f"sqlite:///{db}"])
    assert res.exit_code == 2 and "no fleet loaded" in res.output and "--fleet" in res.output
    assert not db.exists()  # asking which fleet is loaded creates no database


def test_the_lab_fleet_is_a_built_in_name(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """`--fleet lab` is the fleet `lab up` builds by default: a user has no lab.yaml file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lab").mkdir()  # a directory of that name does not hide the built-in fleet
    res = runner.invoke(app, ["fleet", "show", "--fleet", "lab", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["fleet"] == "minilab" and data["headline_gpus"] == 8
    res = runner.invoke(app, ["fleet", "show", "--fleet", "nope"])
    assert res.exit_code == 2 and "built-in fleets: seed-504, lab" in res.output
    docs = Path(__file__).parents[2] / "docs"
    for page in docs.glob("*.md"):
        assert "--fleet lab.yaml" not in page.read_text(encoding="utf-8"), page.name


def test_fleet_path_and_affects() -> None:
    fleet = ["--fleet", "seed-504"]
    res = runner.invoke(app, ["fleet", "path", "us-east/r01/c01/gpu0", "us-east/r01/c02/gpu1",
                              "--json", *fleet])
    assert json.loads(res.output)["fabric"] == "nvlink"
    res = runner.invoke(app, ["fleet", "affects", "us-east/leaf-rail0-0", "--json", *fleet])
    assert json.loads(res.output)["count"] == 36
    res = runner.invoke(app, ["fleet", "path", "us-east/r01/c01/gpu0", "us-east/r01/c01/gpu4",
                              *fleet])
    assert res.exit_code == 2 and "unknown component id" in res.output


def test_demo_runs_twice_and_reuses_store(tmp_path: Path) -> None:
    """End to end, as a user runs it: a real process in a fresh directory."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    env.pop("RACKSCALE_DB", None)
    cmd = [sys.executable, "-m", "rackscale", "demo"]
    first = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == 0, first.stderr
    assert "headline GPUs: 504" in first.stdout
    assert (tmp_path / "rackscale-data" / "rackscale.db").exists()
    second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert second.returncode == 0, second.stderr
    assert "already loaded (no change)" in second.stdout


def _modules_after(*argv: str) -> tuple[int, set[str], str]:
    """Run `rackscale ARGV` in a fresh interpreter; its exit code, the rackscale.cli modules it
    imported, and its output."""
    code = ("import sys, runpy\nsys.argv = ['rackscale', *sys.argv[1:]]\n"
            "try:\n    from rackscale.cli import main\n    main()\nexcept SystemExit as e:\n"
            "    print('EXIT', e.code)\n"
            "print('MODS', ' '.join(sorted(m for m in sys.modules if m.startswith("
            "'rackscale.cli.'))))\n")
    res = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         timeout=120, check=False, env={**os.environ, "COLUMNS": "200"})
    lines = res.stdout.splitlines()
    exit_line = next((x for x in lines if x.startswith("EXIT ")), "EXIT 0")
    mods = next(x for x in lines if x.startswith("MODS"))
    return int(exit_line.split()[1] or 0), set(mods.split()[1:]), res.stdout + res.stderr


def test_a_command_imports_only_its_own_noun() -> None:
    code, mods, out = _modules_after("fleet", "show", "--fleet", "seed-504", "--json")
    assert code == 0, out
    assert "rackscale.cli.fleet" in mods
    for other in ("simulate", "checkpoint", "serve", "lab", "job", "report", "telemetry"):
        assert f"rackscale.cli.{other}" not in mods, (other, sorted(mods))
    # the root's listing and a mistyped noun still see every noun
    code, mods, out = _modules_after("--help")
    assert code == 0 and "rackscale.cli.simulate" in mods and "checkpoint" in out
    code, _, out = _modules_after("lifecyle", "status")
    assert code == 2 and "lifecycle" in out  # click's suggestion names the real noun
