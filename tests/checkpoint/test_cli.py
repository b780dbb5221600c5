"""The CLI on the local-directory default and on a SeaweedFS config: ls/show/verify/restore/gc,
--json, clear errors (exit 2) for an unknown id and a bad config, exit 1 for a corrupt copy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import yaml
from typer.testing import CliRunner

from rackscale.checkpoint import CheckpointManager, Tiers, default_config
from rackscale.cli import app
from tests.checkpoint.conftest import s3_config

runner = CliRunner()


def _save_three(cfg) -> None:
    with CheckpointManager(cfg) as mgr:
        for step in (1, 2, 3):
            mgr.save(step, {"w": np.full(300_000, step, dtype=np.float32)}).wait(30)


def test_cli_on_the_directory_default(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = default_config("rackscale-data")
    _save_three(cfg)
    r = runner.invoke(app, ["checkpoint", "ls", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["checkpoints"]
    assert [x["id"] for x in rows] == ["step-00000001", "step-00000002", "step-00000003"]
    assert rows[1]["state"] == "archived" and rows[1]["tiers"]["archive"] == "yes"
    assert rows[0]["rpo_s"] > 0
    r = runner.invoke(app, ["checkpoint", "show", "latest"])
    assert r.exit_code == 0 and "step-00000003" in r.output and "replicated" in r.output
    assert "(measured)" in r.output  # every figure says whether it is real or simulated
    r = runner.invoke(app, ["checkpoint", "restore", "step-00000002", "--json",
                            "--out", str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["tier"] == "local" and (tmp_path / "out" / "w").exists()
    r = runner.invoke(app, ["checkpoint", "restore", "step-00000404"])
    assert r.exit_code == 2 and "unknown checkpoint" in r.output
    tiers = Tiers(cfg)
    obj = tiers.store("us-west").path(tiers.layout.data("step-00000003", "w"))
    raw = bytearray(obj.read_bytes())
    raw[10] ^= 1
    obj.write_bytes(bytes(raw))
    r = runner.invoke(app, ["checkpoint", "verify", "step-00000003", "--json"])
    assert r.exit_code == 1
    got = {x["tier"]: x["status"] for x in json.loads(r.output)}
    assert got == {"local": "ok", "us-east": "ok", "us-west": "corrupt", "archive": "absent"}
    r = runner.invoke(app, ["checkpoint", "gc", "--json"])
    assert r.exit_code == 0
    assert json.loads(r.output)["deleted"]["local"] == ["step-00000001"]


def test_cli_with_a_seaweedfs_config_and_bad_input(tmp_path: Path, regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions)
    path = tmp_path / "tiers.yaml"
    path.write_text(yaml.safe_dump(cfg))
    from rackscale.checkpoint import parse_config
    _save_three(parse_config(cfg))
    r = runner.invoke(app, ["checkpoint", "ls", "--config", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert all(x["tiers"]["us-west"] == "yes" for x in json.loads(r.output)["checkpoints"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg | {"part_size": 3 << 19}))
    r = runner.invoke(app, ["checkpoint", "ls", "--config", str(bad)])
    assert r.exit_code == 2 and "part_size" in r.output
    r = runner.invoke(app, ["checkpoint", "ls", "--config", str(tmp_path / "nope.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_restore_out_keeps_the_lease_while_copying(tmp_path: Path, monkeypatch) -> None:
    """gc running while `restore --out` copies the files must skip that checkpoint."""
    import rackscale.cli.checkpoint as cli_ckpt
    from rackscale.checkpoint import gc

    monkeypatch.chdir(tmp_path)
    cfg = default_config("rackscale-data")
    _save_three(cfg)
    seen = {}
    real_copytree = cli_ckpt.shutil.copytree

    def copytree(src, dst, **kw):
        seen["gc"] = gc(Tiers(cfg))  # another process's gc, mid-copy
        return real_copytree(src, dst, **kw)

    monkeypatch.setattr(cli_ckpt.shutil, "copytree", copytree)
    r = runner.invoke(app, ["checkpoint", "restore", "step-00000001", "--out",
                            str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "local:step-00000001" in seen["gc"].skipped_leased
    assert (tmp_path / "out" / "w").stat().st_size == 300_000 * 4
