"""Operator text (drain reasons, actors) is printed as written, never read as Rich markup."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app

runner = CliRunner()


@pytest.mark.parametrize("reason", ["[/]", "[bold red]x", "cable [/link] swap \\[", "[/]][["])
def test_markup_in_a_drain_reason_does_not_break_history(tmp_path: Path, reason: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # one line per row, so the reason reads whole
    db = f"sqlite:///{tmp_path}/r.db"
    plant = str(tmp_path / "plant.json")
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    res = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["lifecycle", "advance", "us-east/r02", "--to", "cabled",
                              "--reason", reason, "--db", db, "--plant", plant])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["lifecycle", "drain", "us-east/r03/c04", "--reason", reason,
                              "--db", db])
    assert res.exit_code == 0, res.output
    for cid in ("us-east/r02", "us-east/r03/c04"):
        res = runner.invoke(app, ["lifecycle", "history", cid, "--db", db])
        assert res.exit_code == 0, res.output
        assert reason in res.output
