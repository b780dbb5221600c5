"""`RunnerBackend`: the ladder's real backend on top of any runner (every figure MEASURED).

It maps the ladder's GPU numbers to component ids, hands them to its runner and turns the
answers into `Timed` (seconds per operation, per-element errors). Probes and stages see a
Backend like any other and never learn which runner, host or lab they run on.
"""

from __future__ import annotations

import numpy as np

from rackscale.certify.measure import BackendName, Groups, Timed
from rackscale.certify.runners.base import Runner
from rackscale.fleet import Topology
from rackscale.provenance import Provenance


class RunnerBackend:
    name: BackendName = Provenance.REAL  # as the other backends: the member, not its string

    def __init__(self, topo: Topology, runner: Runner, *, gemm_n: int = 256,
                 gemm_min_s: float = 0.4, copy_bytes: int = 16 << 20) -> None:
        self.topo = topo
        self.runner = runner
        self.gemm_n = gemm_n
        self.gemm_min_s = gemm_min_s
        self.copy_bytes = copy_bytes

    def describe(self) -> str:
        return (f"{self.runner.name} runner: {self.runner.placement.describe} (one agent per "
                "GPU: NCCL on CUDA GPUs, gloo on CPU ranks)")

    def why_not(self, probe: str) -> str | None:
        if probe == "nvlink_plane":
            return ("per-switch-tray bandwidth needs NVSwitch fabric telemetry (NMX); these "
                    "ranks have one NVLink interface each")
        return None

    def _ids(self, gpus: np.ndarray) -> list[str]:
        return [self.topo.gpu_ids[int(g)] for g in gpus]

    def gemm(self, gpus: np.ndarray, n: int, t: float) -> Timed:
        res = self.runner.per_rank({"op": "gemm", "n": n, "min_s": self.gemm_min_s},
                                   self._ids(gpus))
        secs = np.asarray([r.values["seconds"] if r.ok else np.inf for r in res])
        ok = np.asarray([bool(r.values.get("checksum_ok", True)) for r in res])
        return Timed(secs, {i: r.error or "" for i, r in enumerate(res) if not r.ok},
                     {"checksum_ok": ok})

    def copy(self, gpus: np.ndarray, nbytes: int, t: float) -> Timed:
        res = self.runner.per_rank({"op": "copy", "nbytes": nbytes}, self._ids(gpus))
        secs = np.asarray([r.values["seconds"] if r.ok else np.inf for r in res])
        return Timed(secs, {i: r.error or "" for i, r in enumerate(res) if not r.ok})

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        members = [self._ids(groups.members(i)) for i in range(len(groups))]
        res = self.runner.collectives(members, nbytes, nvlink)
        secs = np.asarray([r.values["seconds"] if r.ok else np.inf for r in res])
        ok = np.asarray([bool(r.values.get("result_ok", True)) for r in res])
        return Timed(secs, {i: r.error or "" for i, r in enumerate(res) if not r.ok},
                     {"result_ok": ok})

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        raise RuntimeError(self.why_not("nvlink_plane"))

    def telemetry(self, racks: np.ndarray, t: float) -> Timed:
        """A GPU rank's clock and temperature from NVML; on a CPU rank its CPU allowance (its
        cgroup quota against its healthy share) stands for its clock. No coolant loop or
        power shelf is read through these ranks: flow is reported as exactly the need
        (nothing to measure, flagged in extra) and shelf power as unknown, so neither can be
        blamed here."""
        topo = self.topo
        gpus = np.concatenate([np.arange(topo.racks[int(r)].gpu_first,
                                         topo.racks[int(r)].gpu_end) for r in racks])
        ids = self._ids(gpus)
        res = self.runner.per_rank({"op": "cpu"}, ids)
        clock = np.full(len(gpus), np.nan)
        temp = np.full(len(gpus), np.nan)
        err = np.zeros(len(gpus), bool)
        for i, (g, r) in enumerate(zip(ids, res, strict=True)):
            nominal = self.runner.placement.place(g).nominal_cpu
            quota = r.values.get("cpu_quota") if r.ok else None
            gpu = r.values.get("gpu") if r.ok else None
            err[i] = not r.ok
            if gpu is not None:  # a GPU rank: NVML's SM clock against its maximum
                clock[i] = np.nan if gpu.get("clock_frac") is None else gpu["clock_frac"]
                temp[i] = gpu.get("temp_c", np.nan)
            elif r.ok:
                clock[i] = 1.0 if quota is None or not nominal else min(quota / nominal, 1.0)
        need = np.asarray([topo.racks[int(r)].required_flow_lpm for r in racks])
        return Timed(np.zeros(len(racks)), {}, {
            "flow_lpm": need, "required_lpm": need, "flow_measured": np.zeros(len(racks), bool),
            "shelf_kw": np.full((len(racks), 1), np.nan), "gpus": gpus,
            "gpu_temp_c": temp, "gpu_clock_frac": clock,
            "gpu_error": err})
