"""Renamed options: `--help` shows the new names (a time carries its unit), the old names still
work, and docs/cli.md lists every old name with its new one."""

from __future__ import annotations

import re

import pytest
import typer
from tests.cli.test_option_names import _commands, _table
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli._common import RENAMED_OPTIONS, renamed_args

runner = CliRunner()

# command -> the new names its --help must show
NEW_NAMES = {
    "serve": ["--config"],
    "job run": ["--job-gpus"],
    "job soak": ["--job-gpus", "--duration-min"],
    "lifecycle run": ["--period-s"],
    "simulate run": ["--job-gpus", "--ckpt-interval-min", "--ckpt-cost-s", "--restart-min",
                     "--detect-min", "--straggler-detect-min", "--rack-repair-h",
                     "--region-outage-h"],
    "simulate sweep": ["--job-gpus", "--ckpt-interval-min", "--ckpt-cost-s", "--restart-min",
                       "--detect-min", "--straggler-detect-min", "--rack-repair-h",
                       "--region-outage-h"],
    "simulate storage-whatif": ["--job-gpus", "--ckpt-interval-min", "--restart-min",
                                "--region-outage-h", "--intervals-min"],
}


def _help_options(command: str) -> set[str]:
    res = runner.invoke(app, [*command.split(), "--help"], terminal_width=200,
                        env={"COLUMNS": "200", "TERMINAL_WIDTH": "200"})
    assert res.exit_code == 0, res.output
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", res.output))


@pytest.mark.parametrize("command", sorted(NEW_NAMES))
def test_help_shows_the_new_names_and_not_the_old(command: str) -> None:
    shown = _help_options(command)
    missing = set(NEW_NAMES[command]) - shown
    assert not missing, f"`rackscale {command} --help` lacks {sorted(missing)}"
    old = {o for o, new in RENAMED_OPTIONS.items() if new in NEW_NAMES[command]}
    assert not old & shown, f"`rackscale {command} --help` still shows {sorted(old & shown)}"


def test_every_command_with_a_new_name_takes_the_old_one() -> None:
    """Each old name reaches the option of every command that has its new name, and the
    docs list exactly these old names."""
    seen = set()
    for name, cmd in _commands():
        opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
        assert not opts & set(RENAMED_OPTIONS), f"{name} has an old name as an option"
        for old, new in RENAMED_OPTIONS.items():
            if new in opts:
                seen.add(old)
                assert renamed_args(cmd, [old, "1"]) == [new, "1"], (name, old)
                assert renamed_args(cmd, [f"{old}=1"]) == [f"{new}=1"], (name, old)
    assert seen == set(RENAMED_OPTIONS), f"no command has {set(RENAMED_OPTIONS) - seen}"
    documented = {old: cells[1].split("`")[1] for old, cells in
                  _table("Old option names").items()}
    assert documented == RENAMED_OPTIONS


def test_a_value_or_an_argument_after_dashdash_is_not_renamed() -> None:
    cmd = typer.main.get_command(app).commands["lifecycle"].commands["drain"]  # type: ignore[attr-defined]
    assert renamed_args(cmd, ["--reason", "--period", "x"]) == ["--reason", "--period", "x"]
    soak = typer.main.get_command(app).commands["job"].commands["soak"]  # type: ignore[attr-defined]
    assert renamed_args(soak, ["--gpus", "2", "--", "trainer", "--gpus", "2"]) == [
        "--job-gpus", "2", "--", "trainer", "--gpus", "2"]
    # a command without the new name is left to say the old one is unknown
    res = runner.invoke(app, ["lifecycle", "status", "--period", "1"])
    assert res.exit_code == 2 and "--period" in res.output


def test_an_old_name_works_and_says_the_new_one() -> None:
    res = runner.invoke(app, ["simulate", "run", "--fleet", "seed-504", "--days", "1",
                              "--trials", "2", "--ckpt-interval", "-5", "--json"])
    # the value reached the option: the config refuses it under the field's name
    assert res.exit_code == 2 and "ckpt-interval-min" in res.stdout, res.output
    assert "--ckpt-interval is now --ckpt-interval-min" in res.stderr
