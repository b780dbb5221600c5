"""A path that is not a regular file (a FIFO with no writer, a device) where rackscale reads a
file: refused at once, naming what it is, instead of blocking forever or reading without end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.objectstore import LocalDirStore
from rackscale.cli import app
from rackscale.inputs import InputError, read_text


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_the_shared_reader_refuses_a_special_file(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "spec.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(InputError, match="not a regular file"):
        read_text(path, "fleet spec")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("command", [["checkpoint", "verify", "latest", "--config"],
                                     ["checkpoint", "ls", "--config"],
                                     ["fleet", "load", "--fleet"]])
def test_a_fifo_given_as_a_file_is_refused_with_exit_2(tmp_path: Path, monkeypatch,
                                                       command: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkfifo(tmp_path / "in.yaml")
    r = CliRunner().invoke(app, [*command, "in.yaml"])
    assert r.exit_code == 2, r.output
    assert "FIFO" in r.output and "Traceback" not in r.output


@pytest.mark.timeout(20)
def test_a_fifo_where_an_object_was_is_refused_not_read(tmp_path: Path) -> None:
    store = LocalDirStore(tmp_path, name="us-east")
    store.put("ckpt/a", b"abc")
    assert store.get("ckpt/a") == b"abc"
    os.unlink(tmp_path / "ckpt" / "a")
    os.mkfifo(tmp_path / "ckpt" / "a")
    with pytest.raises(CheckpointError, match="not a regular file"):
        store.get("ckpt/a")
