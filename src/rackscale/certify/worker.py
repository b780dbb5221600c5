"""One rank of a real all-reduce test (torch.distributed: gloo on CPU, NCCL on GPU).

Started by `TorchBackend.allreduce` as a separate process per rank; prints one JSON line
`{"rank": r, "seconds": per-iteration time}`. It imports nothing of rackscale (it is run by
path, `python .../worker.py ...`) so a rank starts as fast as torch imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import cast


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--dist", choices=("gloo", "nccl"), required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", type=int, default=0)
    a = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    cuda = a.dist == "nccl"
    if cuda:
        torch.cuda.set_device(a.device)
    dist.init_process_group(a.dist, init_method=f"tcp://127.0.0.1:{a.port}", rank=a.rank,
                            world_size=a.world, timeout=timedelta(seconds=120))
    try:
        numel = max(a.bytes // 4, 1)
        buf = torch.ones(numel, dtype=torch.float32, device="cuda" if cuda else "cpu")
        for _ in range(a.warmup):
            dist.all_reduce(buf)
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()
        if cuda:
            # torch.cuda.Event's constructor is unannotated; it makes a CUDA event.
            new_event = cast("Callable[..., torch.cuda.Event]", torch.cuda.Event)
            start, end = new_event(enable_timing=True), new_event(enable_timing=True)
            start.record()
            for _ in range(a.iters):
                dist.all_reduce(buf)
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1000.0 / a.iters
        else:
            t0 = time.perf_counter()
            for _ in range(a.iters):
                dist.all_reduce(buf)
            seconds = (time.perf_counter() - t0) / a.iters
        # every element is world**(warmup+iters): a wrong sum means a broken collective
        expected = float(a.world) ** (a.warmup + a.iters)
        ok = bool(torch.allclose(buf[:16].double().cpu(),
                                 torch.full((16,), expected, dtype=torch.float64), rtol=1e-3))
        print(json.dumps({"rank": a.rank, "seconds": seconds, "result_ok": ok}), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
