"""One GPU rank's agent: a long-lived process that answers probe commands on stdin, one JSON
line per command, one JSON line per answer on stdout.

A runner starts one agent per GPU where that GPU lives (a plain process, a network namespace
of the lab, a Slurm task) and keeps it for the campaign, so torch is imported once per rank,
not once per repeat. It imports nothing of rackscale (it is run by path) and never learns which
runner started it. Commands:
  {"op": "gemm", "n": 256, "min_s": 0.4}           -> {"seconds": per GEMM, "checksum_ok": b}
  {"op": "copy", "nbytes": N}                       -> {"seconds": per copy (CPU time)}
  {"op": "allreduce", ...}                          -> {"seconds": median iteration (the
                                                        worst when one stalled), "result_ok"}
  {"op": "cpu"}                                     -> {"cpu_quota": cores or null,
                                                        GPU ranks: "gpu": NVML reading}
  {"op": "env"}                                     -> {"backend", "pid", NCCL variables}
  {"op": "nvml"}                                    -> {"temp_c", "clock_frac", "power_w"}
  {"op": "exit"}
On CUDA GPUs (torch.cuda.is_available()) the GEMM is BF16 and the copy is HBM, both timed
with CUDA events, and an all-reduce is NCCL on one flat group: NCCL itself takes NVLink inside
a node or rack and the NIC between them. A command's "env" (fabric_env.collective_env: NVLink
on or off) is applied by running the command in a child agent started with that environment,
one child per environment kept for the campaign, because NCCL reads its variables once per
process. On CPU ranks (gloo) an all-reduce builds its own gloo process group(s) over a TCP
store on the address the runner names, bound to the interface it names (chosen per test):
inside an NVLink domain the NVLink interface, NVLink off the scale-out NIC. Across domains
with NVLink on it is hierarchical: all-reduce inside each domain on NVLink, one chunk per
local rank across domains on the scale-out NIC, then each chunk broadcast back inside the
domain.
`agent.py --once` runs the one command in $RACKSCALE_OP ($RACKSCALE_REPEATS times, rank from
$JOB_COMPLETION_INDEX when the command has none) and exits 1 if any answer is an error: the
entry point of a rendered Kubernetes Job's pods.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import torch

if __package__:
    from rackscale.certify.runners import fabric_env
else:  # run by path (how runners start it): its sibling module, nothing else of rackscale
    import fabric_env  # type: ignore[no-redef, import-not-found]  # the sibling file, by path


# An iteration stalled when it took STALL_X times the median and at least STALL_FLOOR_S:
# a link that was down (TCP retransmits back off to seconds) holds its iteration for
# seconds, while waiting for a core on a shared host costs a few scheduler slices.
STALL_X = 4.0
STALL_FLOOR_S = 1.0


def repeat_seconds(times: list[float]) -> tuple[float, bool]:
    """A repeat's figure from its iterations, and whether one of them stalled.

    The median, so that one iteration waiting for a core on a shared host (longer than the
    whole test should take) is not reported as a slow link; a fault that slows the link
    slows every iteration and moves the median. But a link that flaps down for seconds
    stalls only the iteration it catches, and the median hid it (a flapping dead NIC gave
    no finding): a stalled iteration is reported as the repeat's figure, so the repeat
    fails hard and the verdict sees the link fail in some repeats and not in others."""
    med = sorted(times)[len(times) // 2]
    worst = max(times)
    if worst >= max(STALL_X * med, STALL_FLOOR_S):
        return worst, True
    return med, False


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


class Child:
    """An agent started with another environment (NCCL variables of one NVLink mode)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.ready = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"child agent exited ({self.proc.wait()})")
            try:
                return dict(json.loads(line))
            except json.JSONDecodeError:
                continue  # a library printing to stdout; agent answers are JSON

    def ask(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._line()

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Agent:
    def __init__(self) -> None:
        import torch
        torch.set_num_threads(1)
        self.torch = torch
        # torch.cuda.Event's constructor is unannotated; it makes a CUDA event.
        self._new_event = cast("Callable[..., torch.cuda.Event]", torch.cuda.Event)
        self.cuda = bool(torch.cuda.is_available())
        self.backend = fabric_env.dist_backend(self.cuda)
        # the rank's GPU on its host: the runner's local id (Slurm may show one GPU only)
        local = int(os.environ.get("RACKSCALE_LOCAL_ID", "0"))
        self.device = f"cuda:{local % torch.cuda.device_count()}" if self.cuda else "cpu"
        if self.cuda:
            torch.cuda.set_device(self.device)
        self.children: dict[tuple[tuple[str, str | None], ...], Child] = {}

    def _elapsed(self, t0: Any) -> float:
        """Seconds since `t0` (a CUDA event on a GPU, a perf_counter reading on the CPU)."""
        if self.cuda:
            end = self._new_event(enable_timing=True)
            end.record()
            end.synchronize()
            return float(t0.elapsed_time(end)) / 1000.0
        return time.perf_counter() - float(t0)

    def _mark(self) -> Any:
        if self.cuda:
            ev = self._new_event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def gemm(self, n: int, min_s: float) -> dict[str, Any]:
        torch = self.torch
        gen = torch.Generator().manual_seed(1234)
        dtype = torch.bfloat16 if self.cuda else torch.float32
        a = torch.rand(n, n, generator=gen).to(self.device, dtype)
        b = torch.rand(n, n, generator=gen).to(self.device, dtype)
        c = a @ b
        # Whole seconds of work, not the best of a few: under a CPU quota the rate that counts
        # is the one sustained across many scheduler periods.
        count, t0 = 0, self._mark()
        while True:
            torch.matmul(a, b, out=c)
            count += 1
            if self.cuda and count % 10:
                continue  # read the clock every 10 GEMMs: a read waits for the GPU
            elapsed = self._elapsed(t0)
            if elapsed >= min_s:
                break
        rows = c.double().sum(dim=1)
        expect = a.double() @ b.double().sum(dim=1)
        scale = (a.double().abs() @ b.double().abs().sum(dim=1)).clamp_min(1e-30)
        # bf16 output rounding is unbiased, so row sums stay within ~0.1%; 1% flags corruption
        rtol = 1e-2 if self.cuda else 1e-4
        ok = bool(torch.all((rows - expect).abs() <= rtol * scale).item())
        return {"seconds": elapsed / count, "checksum_ok": ok}

    def copy(self, nbytes: int) -> dict[str, Any]:
        torch = self.torch
        src = torch.ones(max(nbytes // 4, 1), device=self.device)
        dst = torch.empty_like(src)
        dst.copy_(src)
        best = float("inf")
        for _ in range(5):
            if self.cuda:
                t0 = self._mark()
                dst.copy_(src)
                best = min(best, self._elapsed(t0))
                continue
            # CPU time, not wall time: a CPU quota (the lab's slow GPU) slows compute; the
            # memory system's bandwidth per second of running is what this probe is about.
            c0 = time.thread_time()
            dst.copy_(src)
            best = min(best, time.thread_time() - c0)
        return {"seconds": max(best, 1e-9)}

    def _group(self, store: Any, prefix: str, rank: int, size: int, iface: str,
               timeout: timedelta) -> Any:
        dist = self.torch.distributed
        if self.backend == "nccl":
            nccl_opts = dist.ProcessGroupNCCL.Options()
            nccl_opts._timeout = timeout
            return dist.ProcessGroupNCCL(dist.PrefixStore(prefix, store), rank, size,
                                         nccl_opts)
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
        # NCCL routes NVLink or the NIC itself: the lab's hierarchical emulation is gloo's
        hier = c.get("hier") if self.backend == "gloo" else None
        numel = max(int(c["nbytes"]) // 4, 1)
        if hier is not None:  # equal chunks for the all-gather: round to a multiple of C
            numel = max(numel // hier["chunks"], 1) * hier["chunks"]
        buf = torch.ones(numel, device=self.device)
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
        times = []
        for _ in range(int(c["iters"])):
            t0 = self._mark()
            step()
            times.append(self._elapsed(t0))
        seconds, stalled = repeat_seconds(times)
        barrier.barrier().wait()
        expected = float(c["world"]) ** (int(c["warmup"]) + int(c["iters"]))
        ok = bool(torch.allclose(buf[:16].double().cpu(), torch.full(
            (16,), expected, dtype=torch.float64), rtol=1e-3))
        return {"seconds": seconds, "result_ok": ok, "dist": self.backend,
                "iter_seconds": times, "stalled": stalled}

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

    def nvml(self) -> dict[str, Any]:
        """The rank's GPU as NVML reports it: temperature, SM clock against its maximum, power
        (the thermal probe's per-GPU reading)."""
        if not self.cuda:
            raise RuntimeError("no GPU telemetry (NVML) on a CPU rank")
        import pynvml  # nvidia-ml-py; its absence is this rank's error, reported
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(self.torch.cuda.current_device())
            sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            top = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
            return {"temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                    "clock_frac": sm / top if top else None,
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0}
        finally:
            pynvml.nvmlShutdown()

    def _own_process(self, c: dict[str, Any]) -> bool:
        """Whether `c` must run in a child with its "env": NCCL fixes its variables at the
        first communicator, so an NCCL rank runs each NVLink mode in its own process ("isolate"
        asks the same of a gloo rank)."""
        env = c.get("env") or {}
        here = all(os.environ.get(k) == v for k, v in env.items())
        return bool(env) and not here and (self.backend == "nccl" or bool(c.get("isolate")))

    def _child(self, env: dict[str, str | None]) -> Child:
        key = tuple(sorted(env.items()))
        child = self.children.get(key)
        if child is None or child.proc.poll() is not None:
            child = self.children[key] = Child(fabric_env.apply_env(dict(os.environ), env))
        return child

    def handle(self, c: dict[str, Any]) -> dict[str, Any]:
        if self._own_process(c):
            reply = self._child(c["env"]).ask(c)
            if not reply.get("ok"):
                raise RuntimeError(f"in the rank's {c.get('op')} process: {reply.get('error')}")
            return {k: v for k, v in reply.items() if k not in ("ok", "id")}
        op = c.get("op")
        if op == "gemm":
            return self.gemm(int(c["n"]), float(c["min_s"]))
        if op == "copy":
            return self.copy(int(c["nbytes"]))
        if op == "allreduce":
            return self.allreduce(c)
        if op == "cpu":
            reply = {"cpu_quota": _cpu_quota()}
            if self.cuda:  # a GPU rank's clock and temperature are its GPU's (NVML)
                try:
                    reply["gpu"] = self.nvml()
                except Exception as err:  # NVML absent or failing: said, not hidden
                    reply["gpu_error"] = f"{type(err).__name__}: {err}"[:300]
            return reply
        if op == "nvml":
            return self.nvml()
        if op == "env":
            return {"backend": self.backend, "device": self.device, "pid": os.getpid(),
                    "nccl": {k: os.environ.get(k) for k in fabric_env.NVLINK_OFF_ENV}}
        raise ValueError(f"unknown op {op!r}")

    def close(self) -> None:
        for child in self.children.values():
            child.stop()


def answer(agent: Agent, cmd: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, "id": cmd.get("id")} | agent.handle(cmd)
    except Exception as err:  # reported to the runner: the probe turns it into a FAIL
        return {"ok": False, "id": cmd.get("id"), "error": f"{type(err).__name__}: {err}"[:800],
                "where": traceback.format_exc(limit=2)[-400:]}


def once(agent: Agent) -> int:
    """The pod entry point: one command from the environment, repeated; 1 if any failed."""
    cmd = json.loads(os.environ["RACKSCALE_OP"])
    cmd.setdefault("rank", int(os.environ.get("JOB_COMPLETION_INDEX", "0")))
    failed = False
    for i in range(int(os.environ.get("RACKSCALE_REPEATS", "1"))):
        rep = dict(cmd)
        if rep.get("op") == "allreduce":  # a fresh store per repeat: never a stale key
            rep["tag"], rep["store_port"] = f"{cmd['tag']}-{i}", int(cmd["store_port"]) + i
        reply = answer(agent, rep | {"id": i})
        failed |= not reply["ok"]
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = sys.stdout
    agent = Agent()
    try:
        if "--once" in args:
            return once(agent)
        out.write(json.dumps({"ready": True, "pid": os.getpid(), "backend": agent.backend})
                  + "\n")
        out.flush()
        for line in sys.stdin:
            if not line.strip():
                continue
            cmd = json.loads(line)
            if cmd.get("op") == "exit":
                break
            out.write(json.dumps(answer(agent, cmd)) + "\n")
            out.flush()
    finally:
        agent.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
