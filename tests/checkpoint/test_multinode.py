"""DCP across nodes with real gloo processes: every rank its own local_dir, one SeaweedFS
region (+ replica). Every rank's files reach the tiers, the manifest appears only when all
of them are in, fresh nodes load sharded DTensors exactly; a killed rank leaves no manifest
and a retry (at a smaller world size) completes without the dead rank's stale file."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from rackscale.checkpoint import CheckpointManager, Tiers, gc, parse_config
from rackscale.checkpoint.dcp import TieredStorageReader, TieredStorageWriter
from tests.checkpoint.conftest import s3_config
from tests.checkpoint.gloo_rig import exact, node_cfg, results, run_ranks, sharded


def save_steps(rank: int, world: int, mesh: Any, cfg: dict, node: str,
               steps: list[tuple[int, int, str]]) -> dict:
    c = parse_config(node_cfg(cfg, node.format(rank=rank)))
    out: dict = {}
    for step, seed, mode in steps:
        sd = sharded(seed, mesh)
        w = TieredStorageWriter(c, step, wait_for_tiers=mode != "background")
        try:
            if mode == "async":
                dcp.async_save(sd, storage_writer=w).result()
            else:
                dcp.save(sd, storage_writer=w)
            # dcp.save returns at the region's commit (or, in background, the local one);
            # the replicas' follow
            report = w.handle.wait()  # type: ignore[union-attr]
            out[str(step)] = {"states": report.states if report else None,
                              "errors": report.errors if report else None}
        except (Exception, CheckpointException) as err:  # each rank reports what it saw
            out[str(step)] = {"raised": f"{type(err).__name__}: {err}"}
    return out


def load_step(rank: int, world: int, mesh: Any, cfg: dict, node: str, ckpt_id: str,
              seed: int) -> dict:
    c = parse_config(node_cfg(cfg, node.format(rank=rank)))
    sd = sharded(seed + 1000, mesh)  # other values: the load must overwrite every element
    reader = TieredStorageReader(c, ckpt_id)
    dcp.load(sd, storage_reader=reader)
    return {"exact": exact(sd, seed), "id": reader.restore_report.id,
            "served_by": reader.restore_report.served_by}


def names(tiers: Tiers, store: Any, ckpt_id: str) -> list[str]:
    m = tiers.read_manifest(store, ckpt_id)
    return sorted(i.name for i in m.items) if m else []


def test_each_node_uploads_its_own_files_and_fresh_nodes_load_exact(tmp_path: Path,
                                                                    regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions, archive=None, chunk_size=64 << 10)
    steps = [(1, 1, "sync"), (2, 2, "async"), (3, 3, "background")]
    assert run_ranks(save_steps, 2, tmp_path / "save", cfg, "node{rank}", steps) == [0, 0]
    res = results(tmp_path / "save", 2)
    tiers = Tiers(parse_config(node_cfg(cfg, "observer")))
    for step in ("1", "2", "3"):
        assert "raised" not in res[0][step] and not res[0][step]["errors"], res[0][step]
        assert {"local", "region", "replicated"} <= set(res[0][step]["states"])
        ck = f"step-0000000{step}"
        want = [".metadata", "__0_0.distcp", "__1_0.distcp"]
        assert names(tiers, tiers.region, ck) == want
        assert names(tiers, tiers.replicas[0], ck) == want
    # Each node holds only its own rank's files: nothing was copied between nodes.
    node1 = Path(cfg["local_dir"]) / "node1" / "cache" / "ckpt" / "step-00000001" / "data"
    assert sorted(os.listdir(node1)) == ["__1_0.distcp"]
    # Fresh nodes, another world size: every value of every shard comes back exactly.
    for ck, seed in (("step-00000002", 2), ("latest", 3)):
        assert run_ranks(load_step, 3, tmp_path / f"load-{seed}", cfg, "fresh{rank}-" + ck,
                         ck, seed) == [0, 0, 0]
        assert all(r["exact"] for r in results(tmp_path / f"load-{seed}", 3))
    # The nodes that saved it load it too, their own shards from their own disks.
    assert run_ranks(load_step, 2, tmp_path / "load-same", cfg, "node{rank}",
                     "step-00000001", 1) == [0, 0]
    same = results(tmp_path / "load-same", 2)
    assert all(r["exact"] for r in same) and same[1]["served_by"].get("local", 0) > 0
    # Retention on a node that holds only its rank's parts keeps the last two of them there.
    node1_tiers = Tiers(parse_config(node_cfg(cfg, "node1")))
    rep = gc(node1_tiers)
    assert "step-00000001" in rep.deleted.get("local", []), rep
    assert not node1.exists()
    assert node1_tiers.local.path(node1_tiers.layout.data_prefix("step-00000003")).exists()


def kill_at_first_part(rank: int, world: int, mesh: Any, cfg: dict, node: str,
                       victim: int) -> dict:
    c = parse_config(node_cfg(cfg, node.format(rank=rank)))

    def hook(kind: str, data: dict) -> None:
        if rank == victim and kind == "upload.part":
            os.kill(os.getpid(), signal.SIGKILL)

    w = TieredStorageWriter(c, 5, events=hook)
    dcp.save(sharded(5, mesh, rows=3 * 4096, cols=512), storage_writer=w)  # 8 MiB a rank
    return {}


def test_kill_one_rank_during_upload_then_retry_at_smaller_world(tmp_path: Path,
                                                                 regions: tuple) -> None:
    # One node (a shared local_dir), three ranks; rank 2 dies inside its multipart upload.
    cfg = s3_config(tmp_path, *regions, archive=None, replicas=[])
    codes = run_ranks(kill_at_first_part, 3, tmp_path / "kill", cfg, "node", 2, timeout_s=90)
    assert codes[2] == -signal.SIGKILL and codes[0] != 0, codes
    tiers = Tiers(parse_config(node_cfg(cfg, "node")))
    assert tiers.read_manifest(tiers.region, "step-00000005") is None
    data = tiers.local.path(tiers.layout.data_prefix("step-00000005"))
    assert (data / "__2_0.distcp").exists()  # what the dead rank left behind
    # The retry without the dead rank: same id, world 2, same node.
    steps = [(5, 6, "sync")]
    assert run_ranks(save_steps, 2, tmp_path / "retry", cfg, "node", steps) == [0, 0]
    res = results(tmp_path / "retry", 2)
    assert "raised" not in res[0]["5"] and not res[0]["5"]["errors"], res[0]
    assert names(tiers, tiers.region, "step-00000005") == [".metadata", "__0_0.distcp",
                                                           "__1_0.distcp"]
    assert run_ranks(load_step, 2, tmp_path / "load", cfg, "fresh{rank}", "step-00000005",
                     6) == [0, 0]
    assert all(r["exact"] for r in results(tmp_path / "load", 2))


def test_resume_removes_the_data_of_a_save_killed_before_its_commit(tmp_path: Path,
                                                                     regions: tuple) -> None:
    # Two nodes; rank 0 dies while it uploads its own data, before anything is committed.
    cfg = s3_config(tmp_path, *regions, archive=None, replicas=[])
    codes = run_ranks(kill_at_first_part, 2, tmp_path / "kill", cfg, "node{rank}", 0,
                      timeout_s=90)
    assert codes[0] == -signal.SIGKILL, codes
    node0 = Tiers(parse_config(node_cfg(cfg, "node0")))
    data0 = node0.local.path(node0.layout.ckpt_prefix("step-00000005"))
    assert data0.exists() and not node0.catalog_keys()
    with CheckpointManager(node0) as mgr:
        mgr.resume()
    assert not data0.exists(), "resume left the orphan data directory"
    assert not list((node0.root / "journal").iterdir())
    node1 = Tiers(parse_config(node_cfg(cfg, "node1")))
    with CheckpointManager(node1) as mgr:  # rank 1's part was committed: kept and pushed
        mgr.resume()
    assert node1.local.path(node1.layout.data_prefix("step-00000005")).exists()
    steps = [(5, 7, "sync")]
    assert run_ranks(save_steps, 2, tmp_path / "retry", cfg, "node{rank}", steps) == [0, 0]
    assert run_ranks(load_step, 2, tmp_path / "load", cfg, "fresh{rank}", "step-00000005",
                     7) == [0, 0]
    assert all(r["exact"] for r in results(tmp_path / "load", 2))


def lose_rank_after_the_commit(rank: int, world: int, mesh: Any, cfg: dict, node: str,
                               victim: int) -> dict:
    """Every rank commits locally and returns (wait_for_tiers=False); the victim dies in its
    background upload once `dcp.save` has returned on it, i.e. after rank 0 committed its own
    part and the save's last collective (a kill before that fails rank 0's collective too):
    its node, and with it its part, is then gone for good."""
    c = parse_config(node_cfg(cfg, node.format(rank=rank)))
    saved = threading.Event()

    def hook(kind: str, data: dict) -> None:
        if rank == victim and kind == "upload.part.begin":
            saved.wait(60)  # bounded: the upload waits here until the save has returned
            os.kill(os.getpid(), signal.SIGKILL)

    w = TieredStorageWriter(c, 5, wait_for_tiers=False, events=hook)
    dcp.save(sharded(5, mesh, rows=3 * 4096, cols=512), storage_writer=w)  # 8 MiB a rank
    saved.set()
    report = w.handle.wait()  # type: ignore[union-attr]
    return {"states": report.states, "errors": report.errors}


def test_a_retry_after_a_node_is_lost_mid_save_supersedes_the_partial_attempt(
        tmp_path: Path, regions: tuple) -> None:
    # Rank 0 committed its part locally, rank 1's node died before its part reached the
    # region: the checkpoint exists nowhere as a whole. The retried job (rank 1 on a fresh
    # node) saves the same step again; that save must not be refused, and it loads exactly.
    cfg = s3_config(tmp_path, *regions, archive=None, replicas=[], commit_timeout_s=2.0)
    codes = run_ranks(lose_rank_after_the_commit, 2, tmp_path / "kill", cfg, "node{rank}", 1,
                      timeout_s=90)
    assert codes == [0, -signal.SIGKILL], codes
    first = results(tmp_path / "kill", 1)[0]
    assert "region" not in first["states"] and "us-east" in first["errors"], first
    tiers = Tiers(parse_config(node_cfg(cfg, "node0")))
    assert tiers.read_manifest(tiers.region, "step-00000005") is None
    shutil.rmtree(Path(cfg["local_dir"]) / "node1")  # rank 1's node is replaced
    assert run_ranks(save_steps, 2, tmp_path / "retry", cfg, "node{rank}",
                     [(5, 6, "sync")]) == [0, 0]
    res = results(tmp_path / "retry", 2)
    assert "raised" not in res[0]["5"] and not res[0]["5"]["errors"], res
    assert names(tiers, tiers.region, "step-00000005") == [".metadata", "__0_0.distcp",
                                                           "__1_0.distcp"]
    assert run_ranks(load_step, 2, tmp_path / "load", cfg, "fresh{rank}", "step-00000005",
                     6) == [0, 0]
    assert all(r["exact"] for r in results(tmp_path / "load", 2))
