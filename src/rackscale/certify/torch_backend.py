"""The real backend: probes measured with PyTorch on this machine (every figure MEASURED).

CUDA when a GPU is present (BF16 GEMM, HBM copy timed with CUDA events, NCCL all-reduce),
else the CPU (FP32 GEMM and memory copy timed with perf_counter, gloo all-reduce). Collectives
run as real worker processes, one per rank (world size >= 2). NVLink off sets the variables
of `runners.fabric_env` (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0
NCCL_MNNVL_ENABLE=0) for the workers; NVLink on unsets them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rackscale.certify.measure import Groups, Timed
from rackscale.certify.runners.fabric_env import (
    NVLINK_OFF_ENV,
    apply_env,
    collective_env,
    dist_backend,
)
from rackscale.errors import UserError
from rackscale.provenance import Provenance

__all__ = ["GEMM_ENGINES", "NVLINK_OFF_ENV", "TorchBackend", "TorchMissing",
           "gemm_checksum_ok"]
GEMM_ENGINES = ("auto", "torch", "numpy")


class TorchMissing(UserError):
    pass


def _torch() -> Any:
    try:
        import torch
    except ImportError:  # the core install leaves PyTorch out: name the extra that adds it
        raise TorchMissing(
            "the real backend measures with PyTorch, which is not installed; install the "
            "extra: pip install 'rackscale[torch]' (or run the probe on the digital twin: "
            "--backend twin)") from None
    return torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gemm_checksum_ok(a: Any, b: Any, c: Any, *, rtol: float) -> bool:
    """Verify C = A B by row sums: C 1 must equal A (B 1) (Huang-Abraham ABFT check); a
    corrupted element shifts its row's sum."""
    torch = _torch()
    rows = c.double().sum(dim=1)
    expect = a.double() @ b.double().sum(dim=1)
    scale = (a.double().abs() @ b.double().abs().sum(dim=1)).clamp_min(1e-30)
    return bool(torch.all((rows - expect).abs() <= rtol * scale).item())


class TorchBackend:
    name: Provenance = Provenance.REAL

    def __init__(self, device: str = "auto", gemm_engine: str = "auto") -> None:
        torch = _torch()
        if gemm_engine not in GEMM_ENGINES:
            raise ValueError(f"gemm_engine {gemm_engine!r}: use one of "
                             f"{', '.join(GEMM_ENGINES)}")
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device {device!r}: use auto, cpu or cuda")
        if device == "cuda" and not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but PyTorch sees no CUDA GPU here")
        self.device = device
        self.cuda = device == "cuda"
        self.devices = torch.cuda.device_count() if self.cuda else 1
        self.gemm_n = 8192 if self.cuda else 2048
        self.copy_bytes = (2 << 30) if self.cuda else (256 << 20)
        # On the CPU the fastest BLAS here times the GEMM: torch's or numpy's, whichever
        # multiplied faster in this run ("auto"), so the probe rates the CPU, not one library.
        self.gemm_engine = gemm_engine
        self.last_engine = gemm_engine

    def describe(self) -> str:
        torch = _torch()
        if self.cuda:
            return f"{torch.cuda.get_device_name(0)} x{self.devices} (CUDA, NCCL)"
        return (f"CPU, {torch.get_num_threads()} threads (gloo); GEMM: "
                f"{self.gemm_engine if self.gemm_engine != 'auto' else 'faster of torch/numpy'}")

    def why_not(self, probe: str) -> str | None:
        if probe == "nvlink_plane":
            return "per-switch-tray bandwidth needs NVSwitch fabric telemetry (NMX)"
        if probe == "thermal":
            if not self.cuda:
                return "no GPU telemetry (NVML) on a CPU-only machine"
            try:
                import pynvml  # noqa: F401
            except ImportError:
                return "nvidia-ml-py (NVML) is not installed"
        if probe == "nvlink_allreduce" and not self.cuda:
            return "NVLink needs CUDA GPUs; on the CPU run scaleout_allreduce (gloo)"
        if probe in ("nvlink_allreduce", "scaleout_allreduce") and self.cuda \
                and self.devices < 2:
            return "an NCCL all-reduce needs >= 2 GPUs on this machine (world size >= 2)"
        return None

    # ------------------------------------------------------------------ per device
    def gemm(self, gpus: np.ndarray, n: int, t: float) -> Timed:
        torch = _torch()
        secs, oks = [], []
        for g in gpus:
            dev = f"cuda:{int(g) % self.devices}" if self.cuda else "cpu"
            dtype = torch.bfloat16 if self.cuda else torch.float32
            gen = torch.Generator(device="cpu").manual_seed(1234 + int(g))
            a = torch.rand(n, n, generator=gen).to(dev, dtype)
            b = torch.rand(n, n, generator=gen).to(dev, dtype)
            c = a @ b  # warm-up, and the result we verify
            if self.cuda:
                for _ in range(2):
                    torch.matmul(a, b, out=c)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                iters = 20
                start.record()
                for _ in range(iters):
                    torch.matmul(a, b, out=c)
                end.record()
                torch.cuda.synchronize()
                secs.append(start.elapsed_time(end) / 1000.0 / iters)
                # bf16 output rounding is unbiased, so row sums stay within ~0.1%; 1% flags
                # corruption
                oks.append(gemm_checksum_ok(a, b, c, rtol=1e-2))
            else:
                c, best, ok = self._cpu_gemm_best(a, b, c)
                secs.append(best)
                oks.append(ok)
            del a, b, c
        return Timed(np.asarray(secs), {}, {"checksum_ok": np.asarray(oks)})

    def _cpu_gemm_best(self, a: Any, b: Any, c: Any, reps: int = 4) -> tuple[Any, float, bool]:
        """C = A B timed by the engine asked for, or with "auto" by torch and numpy: the
        faster one's best time, and whether every engine's result checked out.
        Returns (C, seconds, ok).

        Each engine runs in blocks (a warm-up, then `reps` timed calls), and the blocks
        alternate twice so both engines see the same load. Not call by call: torch's OpenMP
        threads and OpenBLAS's threads spin-wait for a while after each call, and on a small
        host a GEMM started right after the other library's ran against those spinning
        threads (measured at n=1024 on 2 cores: the probe at about half the rate of either
        library timed alone)."""
        engines = ("torch", "numpy") if self.gemm_engine == "auto" else (self.gemm_engine,)
        best = dict.fromkeys(engines, float("inf"))
        calls = {e: self._cpu_mul(a, b, c, e) for e in engines}
        for _ in range(2 if len(engines) > 1 else 1):
            for e, (mul, _) in calls.items():
                mul()  # warm-up: thread start, and the other library's threads settle
                for _ in range(reps):
                    t0 = time.perf_counter()
                    mul()
                    best[e] = min(best[e], time.perf_counter() - t0)
        winner = min(best, key=best.__getitem__)
        self.last_engine = winner
        ok = all(gemm_checksum_ok(a, b, out, rtol=1e-4) for _, out in calls.values())
        return calls[winner][1], best[winner], ok

    @staticmethod
    def _cpu_mul(a: Any, b: Any, c: Any, engine: str) -> tuple[Callable[[], object], Any]:
        """(a call computing C = A B by `engine`, the tensor it writes C into)."""
        torch = _torch()
        if engine == "numpy":  # numpy views of the tensors' memory: no copy in or out
            an, bn = a.numpy(), b.numpy()
            cn = np.empty((a.shape[0], b.shape[1]), np.float32)
            return (lambda: np.matmul(an, bn, out=cn)), torch.from_numpy(cn)
        return (lambda: torch.matmul(a, b, out=c)), c

    def copy(self, gpus: np.ndarray, nbytes: int, t: float) -> Timed:
        torch = _torch()
        secs = []
        for g in gpus:
            dev = f"cuda:{int(g) % self.devices}" if self.cuda else "cpu"
            src = torch.empty(nbytes // 4, dtype=torch.float32, device=dev).fill_(1.0)
            dst = torch.empty_like(src)
            dst.copy_(src)
            if self.cuda:
                for _ in range(3):
                    dst.copy_(src)
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                iters = 20
                start.record()
                for _ in range(iters):
                    dst.copy_(src)
                end.record()
                torch.cuda.synchronize()
                secs.append(start.elapsed_time(end) / 1000.0 / iters)
            else:
                best = float("inf")
                for _ in range(5):
                    t0 = time.perf_counter()
                    dst.copy_(src)
                    best = min(best, time.perf_counter() - t0)
                secs.append(best)
            del src, dst
        return Timed(np.asarray(secs))

    # ------------------------------------------------------------------ collectives
    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        secs = []
        ok = []
        for i in range(len(groups)):
            world = int(groups.sizes[i])
            if self.cuda and world > self.devices:
                raise RuntimeError(f"group of {world} GPUs but this machine has {self.devices}")
            r = self._run_workers(world, nbytes, nvlink)
            secs.append(max(x["seconds"] for x in r))
            ok.append(all(x["result_ok"] for x in r))
        return Timed(np.asarray(secs), {}, {"result_ok": np.asarray(ok)})

    def _run_workers(self, world: int, nbytes: int, nvlink: bool) -> list[dict[str, Any]]:
        port = free_port()
        env = apply_env(dict(os.environ) | {"OMP_NUM_THREADS": "1"}, collective_env(nvlink))
        iters = 20 if nbytes <= (1 << 20) else 5
        # run by path, not -m: importing the rackscale package would cost each rank seconds
        worker = str(Path(__file__).with_name("worker.py"))
        procs = [subprocess.Popen(
            [sys.executable, worker, "--rank", str(r), "--world", str(world), "--port",
             str(port), "--dist", dist_backend(self.cuda), "--bytes", str(nbytes),
             "--iters", str(iters), "--device", str(r)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for r in range(world)]
        out = []
        failures = []
        for r, p in enumerate(procs):
            try:
                stdout, stderr = p.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise RuntimeError(f"all-reduce rank {r} did not finish in 300 s") from None
            if p.returncode != 0:
                failures.append(f"rank {r} exited {p.returncode}: {stderr.strip()[-400:]}")
                continue
            out.append(json.loads(stdout.strip().splitlines()[-1]))
        if failures:
            raise RuntimeError("; ".join(failures))
        return out

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        raise RuntimeError(self.why_not("nvlink_plane"))

    def telemetry(self, racks: np.ndarray, t: float) -> Timed:
        reason = self.why_not("thermal")
        if reason:
            raise RuntimeError(reason)
        import pynvml
        pynvml.nvmlInit()
        try:
            temps, clocks, power = [], [], []
            for i in range(self.devices):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                temps.append(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
                sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                top = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)
                clocks.append(sm / top if top else np.nan)
                power.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
        finally:
            pynvml.nvmlShutdown()
        nan = np.full(len(racks), np.nan)
        return Timed(np.zeros(len(racks)), {}, {
            "flow_lpm": nan, "required_lpm": nan, "shelf_kw": nan[:, None],
            "gpus": np.arange(self.devices), "gpu_temp_c": np.asarray(temps, float),
            "gpu_clock_frac": np.asarray(clocks, float), "gpu_power_w": np.asarray(power),
            "gpu_error": np.zeros(self.devices, bool)})
