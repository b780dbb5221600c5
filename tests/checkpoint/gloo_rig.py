"""Real gloo process groups for the DCP tests: fork `world` ranks, each on its own "node"
(its own local_dir) or all on one, and collect what each rank wrote as JSON."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from rackscale.checkpoint.seaweed import free_port


def init(rank: int, world: int, port: int) -> DeviceMesh:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A short timeout: a test that kills a rank must see the others fail, not hang.
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=30))
    return init_device_mesh("cpu", (world,))


def node_cfg(cfg: dict, node: str) -> dict:
    """The tiers config of one node: its own local NVMe directory, the shared tiers."""
    return cfg | {"local_dir": str(Path(cfg["local_dir"]) / node)}


def full_state(seed: int, rows: int = 96, cols: int = 64) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(rows, cols, generator=g),
            "b": torch.randn(rows, generator=g).to(torch.bfloat16),
            "step": torch.tensor([seed], dtype=torch.int64).repeat(rows)}


def sharded(seed: int, mesh: DeviceMesh, **size: int) -> dict[str, Any]:
    return {k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in full_state(seed, **size).items()}


def exact(sd: dict[str, Any], seed: int, **size: int) -> bool:
    want = full_state(seed, **size)
    return all(torch.equal(sd[k].full_tensor(), want[k]) for k in want)


def _entry(fn: Callable, rank: int, world: int, port: int, out: str, args: tuple) -> None:
    mesh = init(rank, world, port)
    try:
        result = fn(rank, world, mesh, *args)
    finally:
        dist.destroy_process_group()
    Path(out, f"rank-{rank}.json").write_text(json.dumps(result))


def run_ranks(fn: Callable, world: int, out: Path, *args: Any,
              timeout_s: float = 120) -> list[int | None]:
    """Fork the ranks, wait for them; returns their exit codes (leftovers are killed)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("rank-*.json"):
        old.unlink()
    ctx = mp.get_context("fork")
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, str(out), args))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    for p in procs:
        if p.exitcode is None:  # only the processes this helper started, by their handle
            p.kill()
            p.join(10)
    return [p.exitcode for p in procs]


def results(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]
