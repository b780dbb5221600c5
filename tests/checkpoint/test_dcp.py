"""PyTorch DCP through the tiers with real gloo processes: save on 2 ranks (sync and
async_save), wipe the local cache, load on 3 ranks (resharding) from the SeaweedFS region."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from rackscale.checkpoint import Tiers, parse_config
from rackscale.checkpoint.dcp import TieredStorageReader, TieredStorageWriter
from rackscale.checkpoint.seaweed import free_port
from tests.checkpoint.conftest import s3_config


def model_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=96)
    return {k: v.detach().clone() for k, v in layer.state_dict().items()}


def worker(rank: int, world: int, port: int, cfg: dict, mode: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    tiers_cfg = parse_config(cfg)
    result: dict = {}
    if mode == "save":
        for step, seed in ((1, 1), (2, 2)):
            sd = {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in model_state(seed).items()}
            writer = TieredStorageWriter(tiers_cfg, step)
            if step == 1:
                dcp.save(sd, storage_writer=writer)
            else:
                dcp.async_save(sd, storage_writer=writer).result()
            if rank == 0:
                # the save returned at the region's commit; the replica's follows it
                result[step] = writer.handle.wait().states if writer.handle else None
    else:
        sd = {k: distribute_tensor(torch.zeros_like(v), mesh, [Shard(0)])
              for k, v in model_state(0).items()}
        reader = TieredStorageReader(tiers_cfg, "latest")
        dcp.load(sd, storage_reader=reader)
        want = model_state(2)
        result = {"equal": all(torch.equal(sd[k].full_tensor(), want[k]) for k in want),
                  "id": reader.restore_report.id, "tier": reader.restore_report.tier,
                  "local_shape": list(next(iter(sd.values())).to_local().shape)}
    dist.destroy_process_group()
    Path(out, f"{mode}-{rank}.json").write_text(json.dumps(result))


def run(world: int, cfg: dict, mode: str, out: Path) -> None:
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, world, port, cfg, mode, str(out)))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * world


def test_dcp_save_async_save_and_resharded_load_through_the_tiers(tmp_path: Path,
                                                                 regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions, archive=None, chunk_size=256 << 10)
    run(2, cfg, "save", tmp_path)
    states = json.loads((tmp_path / "save-0.json").read_text())
    assert set(states["1"]) >= {"local", "region", "replicated"}
    assert set(states["2"]) >= {"local", "region", "replicated"}
    tiers = Tiers(parse_config(cfg))
    m = tiers.read_manifest(tiers.region, "step-00000002")
    assert m is not None and ".metadata" in [i.name for i in m.items]
    shutil.rmtree(tiers.local.root)  # the load runs on a fresh node: everything from S3
    run(3, cfg, "load", tmp_path)
    for r in range(3):
        res = json.loads((tmp_path / f"load-{r}.json").read_text())
        assert res["equal"] and res["id"] == "step-00000002"
    tiers_seen = {json.loads((tmp_path / f"load-{r}.json").read_text())["tier"]
                  for r in range(3)}
    assert "us-east" in tiers_seen  # the first rank filled the cache from the region
