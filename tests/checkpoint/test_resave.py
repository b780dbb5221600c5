"""Re-saving a committed id (a restarted job saving its resume step again) is refused before
any byte is written, with the region down and with it up; the first checkpoint stays
readable and exact. Background tier failures are reported (save report, `checkpoint show`,
a log line); `checkpoint_id` beside the tiered writer/reader is refused or mapped."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed.checkpoint as dcp
from typer.testing import CliRunner

from rackscale.checkpoint import CheckpointError, CheckpointManager, Restorer, Tiers, parse_config
from rackscale.checkpoint.dcp import TieredStorageReader, TieredStorageWriter
from rackscale.checkpoint.errors import AlreadyCommitted
from rackscale.checkpoint.seaweed import free_port
from rackscale.cli import app
from tests.checkpoint.conftest import s3_config
from tests.checkpoint.gloo_rig import node_cfg, results, run_ranks
from tests.checkpoint.test_multinode import load_step, save_steps


def fingerprint(root: Path) -> dict[str, tuple]:
    """Content hash, inode and mtime of every file: 'never opened for writing' means none
    of the three changes (a rewrite with the same bytes still moves the mtime)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for fn in files:
            p = Path(dirpath, fn)
            st = p.stat()
            out[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(),
                                             st.st_ino, st.st_mtime_ns)
    return out


def dead_region(cfg: dict) -> dict:
    return cfg | {"region": cfg["region"] | {"endpoint": f"http://127.0.0.1:{free_port()}"}}


def test_dcp_resave_with_the_region_down_is_refused_and_the_first_stays_exact(
        tmp_path: Path, regions: tuple) -> None:
    cfg = dead_region(s3_config(tmp_path, *regions, archive=None, replicas=[]))
    assert run_ranks(save_steps, 2, tmp_path / "s1", cfg, "node", [(20, 20, "sync")]) == [0, 0]
    first = results(tmp_path / "s1", 2)[0]["20"]
    assert list(first["states"]) == ["staged", "local"] and "us-east" in first["errors"]
    data = Path(cfg["local_dir"]) / "node" / "cache" / "ckpt" / "step-00000020"
    before = fingerprint(data)
    assert run_ranks(save_steps, 2, tmp_path / "s2", cfg, "node", [(20, 21, "sync")]) == [0, 0]
    assert fingerprint(data) == before
    for r in results(tmp_path / "s2", 2):
        assert "already exists" in r["20"]["raised"], r
    for ck in ("step-00000020", "latest"):
        assert run_ranks(load_step, 2, tmp_path / f"l-{ck}", cfg, "node", ck, 20) == [0, 0]
        assert all(r["exact"] for r in results(tmp_path / f"l-{ck}", 2))


def test_dcp_resave_with_the_region_up_is_refused_at_save_time(tmp_path: Path,
                                                               regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions, archive=None)
    assert run_ranks(save_steps, 2, tmp_path / "s1", cfg, "node{rank}",
                     [(30, 30, "sync")]) == [0, 0]
    before = {n: fingerprint(Path(cfg["local_dir"]) / n) for n in ("node0", "node1")}
    # wait_for_tiers=False: the refusal still comes from dcp.save, on every rank.
    assert run_ranks(save_steps, 2, tmp_path / "s2", cfg, "node{rank}",
                     [(30, 31, "background")]) == [0, 0]
    for r in results(tmp_path / "s2", 2):
        assert "already exists" in r["30"]["raised"], r
    for n in ("node0", "node1"):
        with CheckpointManager(parse_config(node_cfg(cfg, n))) as mgr:
            mgr.resume()  # a restarted job resumes: it must not drop the committed data
        after = fingerprint(Path(cfg["local_dir"]) / n)
        assert {k: v for k, v in after.items() if "/data/" in k} == \
            {k: v for k, v in before[n].items() if "/data/" in k}
    for node in ("node{rank}", "fresh{rank}"):
        assert run_ranks(load_step, 2, tmp_path / f"l-{node}", cfg, node, "step-00000030",
                         30) == [0, 0]
        assert all(r["exact"] for r in results(tmp_path / f"l-{node}", 2))


def state(v: int) -> dict:
    return {"w": np.full(200_000, v, dtype=np.float32), "tag": f"v{v}".encode()}


def test_manager_resave_refused_before_staging_and_in_the_background(
        tmp_path: Path, regions: tuple, caplog: pytest.LogCaptureFixture) -> None:
    good = s3_config(tmp_path, *regions, archive=None, replicas=[])
    down = dead_region(good)
    caplog.set_level(logging.WARNING, logger="rackscale.checkpoint")
    with CheckpointManager(parse_config(down)) as mgr:
        r = mgr.save(5, state(5)).wait(60)
        assert "us-east" in r.errors
        with pytest.raises(AlreadyCommitted, match="step-00000005 already exists"):
            mgr.save(5, state(6))
    # The background failure is in a log line and in `checkpoint show`.
    assert any("us-east failed" in rec.getMessage() for rec in caplog.records)
    cfg_file = tmp_path / "tiers.json"
    cfg_file.write_text(json.dumps(down))
    out = CliRunner().invoke(app, ["checkpoint", "show", "step-00000005", "--json",
                                   "--config", str(cfg_file)])
    assert out.exit_code == 0, out.output
    assert "us-east" in json.loads(out.output)["errors"]
    got, _ = Restorer(Tiers(parse_config(down))).load_state("step-00000005")
    assert np.array_equal(got["w"], state(5)["w"])
    # Region up; another node saves an id the region already holds: refused before writing.
    with CheckpointManager(parse_config(good)) as mgr:
        mgr.save(7, state(7)).wait(60)
    other = parse_config(good | {"local_dir": str(tmp_path / "other-node")})
    mgr = CheckpointManager(other)
    h = mgr.save(7, state(8))
    with pytest.raises(AlreadyCommitted, match="region us-east holds its manifest"):
        h.wait(60)
    with pytest.raises(AlreadyCommitted):  # close() still says so, after stopping its threads
        mgr.close()
    assert not Tiers(other).local.path("ckpt/step-00000007").exists()
    got, _ = Restorer(Tiers(other)).load_state("step-00000007")
    assert np.array_equal(got["w"], state(7)["w"])


def test_checkpoint_id_beside_the_tiered_writer_and_reader(tmp_path: Path) -> None:
    cfg = parse_config({"local_dir": str(tmp_path / "local"),
                        "region": {"name": "r", "kind": "dir", "path": str(tmp_path / "r")}})
    sd = {"x": torch.arange(10.0)}
    elsewhere = str(tmp_path / "elsewhere")
    with pytest.raises(CheckpointError, match="was passed beside TieredStorageWriter"):
        dcp.save(sd, checkpoint_id=elsewhere, storage_writer=TieredStorageWriter(cfg, 1))
    assert not (tmp_path / "local" / "cache" / "ckpt" / "step-00000001" / "data").exists() \
        or not os.listdir(tmp_path / "local" / "cache" / "ckpt" / "step-00000001" / "data")
    assert not Path(elsewhere).exists()
    # The writer's own id is accepted (mapped to the tiers), and so is the reader's.
    dcp.save(sd, checkpoint_id="step-00000001", storage_writer=TieredStorageWriter(cfg, 1))
    out = {"x": torch.zeros(10)}
    with pytest.raises(CheckpointError, match="TieredStorageReader"):
        dcp.load(out, checkpoint_id=str(tmp_path / "x"),
                 storage_reader=TieredStorageReader(cfg, "latest"))
    dcp.load(out, checkpoint_id="step-00000001",
             storage_reader=TieredStorageReader(cfg, "latest"))
    assert torch.equal(out["x"], sd["x"])
    with pytest.raises(CheckpointError, match="set by the tiers config"):
        TieredStorageWriter(cfg, 2, sync_files=False)
