"""One GPU rank's agent: a long-lived process that answers probe commands on stdin, one JSON
line per command, one JSON line per answer on stdout.

A runner starts one agent per GPU where that GPU lives (a plain process, a network namespace
of the lab, a Slurm task) and keeps it for the campaign, so torch is imported once per rank,
not once per repeat. It imports nothing of rackscale (it is run by path) and never learns which
runner started it. Commands:
  {"op": "gemm", "n": 256, "min_s": 0.4}           -> {"seconds": per GEMM, "checksum_ok": b}
  {"op": "copy", "nbytes": N}                       -> {"seconds": per copy (CPU time)}
  {"op": "allreduce", ...}                          -> {"seconds": median iteration, "result_ok"}
  {"op": "cpu"}                                     -> {"cpu_quota": cores or null}
  {"op": "exit"}
An all-reduce builds its own gloo process group(s) over a TCP store on the address the runner
names, bound to the interface it names (GLOO_SOCKET_IFNAME's job, chosen per test): inside an
NVLink domain the NVLink interface, NVLink off the scale-out NIC. Across domains with NVLink on
it is hierarchical: all-reduce inside each domain on NVLink, one chunk per local rank across
domains on the scale-out NIC, then each chunk broadcast back inside the domain.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any


def _cpu_quota() -> float | None:
    """Cores this process may use per its cgroup (v1 cpu.cfs_quota_us or v2 cpu.max)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _h, ctrl, path = line.split(":", 2)
        base = None
        if "cpu" in ctrl.split(","):
            base = Path("/sys/fs/cgroup/cpu") / path.lstrip("/")
            q, p = base / "cpu.cfs_quota_us", base / "cpu.cfs_period_us"
            if q.exists():
                quota = int(q.read_text())
                return None if quota < 0 else quota / int(p.read_text())
        if ctrl == "" and (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max").exists():
            text = (Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.max").read_text().split()
            return None if text[0] == "max" else int(text[0]) / int(text[1])
    return None


class Agent:
    def __init__(self) -> None:
        import torch
        torch.set_num_threads(1)
        self.torch = torch

    def gemm(self, n: int, min_s: float) -> dict[str, Any]:
        torch = self.torch
        gen = torch.Generator().manual_seed(1234)
        a, b = torch.rand(n, n, generator=gen), torch.rand(n, n, generator=gen)
        c = a @ b
        # Whole seconds of work, not the best of a few: under a CPU quota the rate that counts
        # is the one sustained across many scheduler periods.
        count, t0 = 0, time.perf_counter()
        while True:
            torch.matmul(a, b, out=c)
            count += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_s:
                break
        rows = c.double().sum(dim=1)
        expect = a.double() @ b.double().sum(dim=1)
        scale = (a.double().abs() @ b.double().abs().sum(dim=1)).clamp_min(1e-30)
        ok = bool(torch.all((rows - expect).abs() <= 1e-4 * scale).item())
        return {"seconds": elapsed / count, "checksum_ok": ok}

    def copy(self, nbytes: int) -> dict[str, Any]:
        torch = self.torch
        src = torch.ones(max(nbytes // 4, 1))
        dst = torch.empty_like(src)
        dst.copy_(src)
        # CPU time, not wall time: a CPU quota (the lab's slow GPU) slows compute; the memory
        # system's bandwidth per second of running is what this probe is about.
        best = float("inf")
        for _ in range(5):
            t0 = time.thread_time()
            dst.copy_(src)
            best = min(best, time.thread_time() - t0)
        return {"seconds": max(best, 1e-9)}

    def _group(self, store: Any, prefix: str, rank: int, size: int, iface: str,
               timeout: timedelta) -> Any:
        dist = self.torch.distributed
        opts = dist.ProcessGroupGloo._Options()
        opts._devices = [dist.ProcessGroupGloo.create_device(interface=iface)]
        opts._timeout = timeout
        return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size, opts)

    def allreduce(self, c: dict[str, Any]) -> dict[str, Any]:
        torch = self.torch
        dist = torch.distributed
        timeout = timedelta(seconds=float(c["timeout_s"]))
        store = dist.TCPStore(c["store_host"], int(c["store_port"]), int(c["world"]),
                              c["rank"] == 0, timeout=timeout, wait_for_workers=False)
        hier = c.get("hier")
        numel = max(int(c["nbytes"]) // 4, 1)
        if hier is not None:  # equal chunks for the all-gather: round to a multiple of C
            numel = max(numel // hier["chunks"], 1) * hier["chunks"]
        buf = torch.ones(numel)
        if hier is None:
            pg = self._group(store, c["tag"], c["rank"], c["world"], c["iface"], timeout)

            def step() -> None:
                pg.allreduce([buf]).wait()
            barrier = pg
        else:
            step, barrier = self._hierarchical(store, c, buf, timeout)
        for _ in range(int(c["warmup"])):
            step()
        barrier.barrier().wait()
        # Each iteration timed on its own and the median kept: on a shared host one
        # iteration can wait for a core for longer than the whole test should take, and a
        # mean would report that stall as a slow link. A fault of the link (or one that
        # flaps on the scale of seconds) slows every iteration and moves the median.
        times = []
        for _ in range(int(c["iters"])):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        seconds = sorted(times)[len(times) // 2]
        barrier.barrier().wait()
        expected = float(c["world"]) ** (int(c["warmup"]) + int(c["iters"]))
        ok = bool(torch.allclose(buf[:16].double(), torch.full((16,), expected,
                                                              dtype=torch.float64), rtol=1e-3))
        return {"seconds": seconds, "result_ok": ok, "iter_seconds": times}

    def _hierarchical(self, store: Any, c: dict[str, Any], buf: Any, timeout: timedelta,
                      ) -> tuple[Any, Any]:
        """NVLink on across domains: all-reduce inside the domain (NVLink), chunk k across
        domains by each domain's local rank k (scale-out), all-gather of the chunks inside
        the domain (NVLink). Domains larger than the smallest one (C chunks) hand the whole
        result to their extra ranks by one broadcast from local rank 0."""
        dist = self.torch.distributed
        h, tag = c["hier"], c["tag"]
        local, size, chunks = h["local"], h["domain_size"], h["chunks"]
        nv, so = h["nv_iface"], h["so_iface"]
        dom = self._group(store, f"{tag}/d{h['domain']}", local, size, nv, timeout) \
            if size > 1 else None
        carrier = local < chunks
        cross = self._group(store, f"{tag}/x{local}", h["cross_rank"], h["cross_size"], so,
                            timeout) if carrier and h["cross_size"] > 1 else None
        gather = self._group(store, f"{tag}/g{h['domain']}", local, chunks, nv, timeout) \
            if carrier and chunks > 1 else None
        extra = None
        if size > chunks and (local == 0 or not carrier):
            extra = self._group(store, f"{tag}/e{h['domain']}",
                                0 if local == 0 else local - chunks + 1, size - chunks + 1,
                                nv, timeout)
        parts = list(self.torch.tensor_split(buf, chunks))

        def step() -> None:
            if dom is not None:
                dom.allreduce([buf]).wait()
            if cross is not None:
                cross.allreduce([parts[local]]).wait()
            if gather is not None:
                out = [[self.torch.empty_like(parts[0]) for _ in range(chunks)]]
                gather.allgather(out, [parts[local].clone()]).wait()
                for k in range(chunks):
                    parts[k].copy_(out[0][k])
            if extra is not None:
                extra.broadcast([buf], dist.BroadcastOptions()).wait()
        barrier = self._group(store, f"{tag}/all", c["rank"], c["world"], so, timeout)
        return step, barrier

    def handle(self, c: dict[str, Any]) -> dict[str, Any]:
        op = c.get("op")
        if op == "gemm":
            return self.gemm(int(c["n"]), float(c["min_s"]))
        if op == "copy":
            return self.copy(int(c["nbytes"]))
        if op == "allreduce":
            return self.allreduce(c)
        if op == "cpu":
            return {"cpu_quota": _cpu_quota()}
        raise ValueError(f"unknown op {op!r}")


def main() -> int:
    out = sys.stdout
    agent = Agent()
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        if cmd.get("op") == "exit":
            break
        try:
            reply = {"ok": True, "id": cmd.get("id")} | agent.handle(cmd)
        except Exception as err:  # reported to the runner: the probe turns it into a FAIL
            reply = {"ok": False, "id": cmd.get("id"),
                     "error": f"{type(err).__name__}: {err}"[:800],
                     "where": traceback.format_exc(limit=2)[-400:]}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
