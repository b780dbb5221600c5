"""Probes: one measurement of one kind on one scope, on whichever backend they are given.

`detect()` says whether the probe can run on its backend here; `run(scope)` returns a
`Measurement`. The formulas from timing to figure live here, once, for both backends:
GEMM TFLOPS = 2 n^3 / t; memory bandwidth counts bytes read plus written; all-reduce bus
bandwidth follows nccl-tests (busbw = algbw x 2(n-1)/n, docs/figures.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from rackscale.certify.measure import Backend, Measurement, Scope
from rackscale.registry import Registry, UnknownName


class UnknownProbe(UnknownName):
    pass


class Probe(Protocol):
    name: str
    unit: str

    def detect(self) -> bool:
        """Whether this probe can run on its backend here (see `why_not`)."""

    def run(self, scope: Scope) -> Measurement: ...


ProbeMaker = Callable[[Backend], Probe]


class ProbeRegistry(Registry[ProbeMaker]):
    """Probe makers by name. Tests build their own registry (`PROBES.copy()`) or register an
    example inside `PROBES.scoped()`; `PROBES` is the default one."""

    def __init__(self) -> None:
        super().__init__("probe", error=UnknownProbe)

    def create(self, name: str, backend: Backend) -> Probe:
        return self[name](backend)


PROBES = ProbeRegistry()


class _BaseProbe:
    name = ""
    unit = ""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def detect(self) -> bool:
        return self.why_not() is None

    def why_not(self) -> str | None:
        return self.backend.why_not(self.name)

    def _need(self, value: np.ndarray | None, what: str) -> np.ndarray:
        if value is None or len(value) == 0:
            raise ValueError(f"probe {self.name} needs scope.{what}")
        return value

    def _measurement(self, values: np.ndarray, scope: Scope, errors: dict[int, str],
                     extra: dict[str, np.ndarray] | None = None) -> Measurement:
        values = values.astype(float)
        for pos in errors:
            values[pos] = np.nan
        return Measurement(probe=self.name, unit=self.unit, backend=self.backend.name,
                           values=values, errors=errors, extra=extra or {}, t=scope.t)


@PROBES.register("gemm")
class GemmProbe(_BaseProbe):
    """BF16 (CUDA) / FP32 (CPU) matrix product: TFLOPS and a verified result (catches SDC)."""

    name, unit = "gemm", "TFLOPS"

    def run(self, scope: Scope) -> Measurement:
        gpus = self._need(scope.gpus, "gpus")
        n = scope.gemm_n or self.backend.gemm_n
        timed = self.backend.gemm(gpus, n, scope.t)
        with np.errstate(divide="ignore", invalid="ignore"):
            tflops = 2.0 * float(n) ** 3 / timed.seconds / 1e12
        return self._measurement(tflops, scope, timed.errors, timed.extra)


@PROBES.register("hbm")
class HbmProbe(_BaseProbe):
    """Device-memory copy bandwidth, counting bytes read and written."""

    name, unit = "hbm", "TB/s"

    def run(self, scope: Scope) -> Measurement:
        gpus = self._need(scope.gpus, "gpus")
        nbytes = scope.copy_bytes or self.backend.copy_bytes
        timed = self.backend.copy(gpus, nbytes, scope.t)
        with np.errstate(divide="ignore", invalid="ignore"):
            tbps = 2.0 * nbytes / timed.seconds / 1e12
        return self._measurement(tbps, scope, timed.errors, timed.extra)


class _AllReduceProbe(_BaseProbe):
    unit = "GB/s busbw"
    nvlink = True

    def run(self, scope: Scope) -> Measurement:
        if scope.groups is None or len(scope.groups) == 0:
            raise ValueError(f"probe {self.name} needs scope.groups")
        timed = self.backend.allreduce(scope.groups, scope.size_bytes, self.nvlink, scope.t)
        k = scope.groups.sizes.astype(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            algbw = scope.size_bytes / timed.seconds / 1e9
        busbw = algbw * 2.0 * (k - 1.0) / k  # nccl-tests all-reduce bus bandwidth
        # A collective that returns a wrong sum is broken however fast it ran: an error, so
        # the group fails (the real backend checks the sum; the twin reports no result_ok).
        errors = dict(timed.errors)
        result_ok = np.asarray(timed.extra.get("result_ok", np.ones(len(k), bool)), bool)
        for pos in np.flatnonzero(~result_ok):
            errors.setdefault(int(pos), "all-reduce returned a wrong sum (result check)")
        return self._measurement(busbw, scope, errors, {"algbw": algbw, **timed.extra})


@PROBES.register("nvlink_allreduce")
class NvlinkAllReduceProbe(_AllReduceProbe):
    """All-reduce with NVLink on (inside a domain, or hierarchical across domains)."""

    name, nvlink = "nvlink_allreduce", True


@PROBES.register("scaleout_allreduce")
class ScaleoutAllReduceProbe(_AllReduceProbe):
    """All-reduce with NVLink off (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0):
    every byte crosses the NICs, cables, leaves and spines."""

    name, nvlink = "scaleout_allreduce", False


@PROBES.register("nvlink_plane")
class NvlinkPlaneProbe(_BaseProbe):
    """Bandwidth through each NVLink switch tray of a domain (fabric port counters)."""

    name, unit = "nvlink_plane", "GB/s"

    def run(self, scope: Scope) -> Measurement:
        domains = self._need(scope.domains, "domains")
        timed = self.backend.nvlink_plane(domains, scope.t)
        return self._measurement(timed.extra["gbps"], scope, timed.errors, timed.extra)


@PROBES.register("thermal")
class ThermalProbe(_BaseProbe):
    """Rack coolant flow against need (value = fraction of need), shelf power, GPU
    temperatures and clocks (in extra)."""

    name, unit = "thermal", "fraction of needed flow"

    def run(self, scope: Scope) -> Measurement:
        racks = self._need(scope.racks, "racks")
        timed = self.backend.telemetry(racks, scope.t)
        ex = timed.extra
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = ex["flow_lpm"] / ex["required_lpm"]
        # rack-level errors only; per-GPU errors travel in extra['gpu_errors']
        return self._measurement(frac, scope, timed.errors, ex)
