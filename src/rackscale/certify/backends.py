"""The twin backend: answers probes from `faults.TwinHardware` (every figure SIMULATED).

It reports what the real backend reports (seconds per operation), computed back from the
twin's modelled throughput, so the probes' formulas are exercised on the twin too.
"""

from __future__ import annotations

import numpy as np

from rackscale.certify.measure import Groups, Timed
from rackscale.faults import TwinHardware
from rackscale.provenance import Provenance


class TwinBackend:
    name: Provenance = Provenance.TWIN
    gemm_n = 16384
    copy_bytes = 4 << 30

    def __init__(self, hw: TwinHardware) -> None:
        self.hw = hw

    def why_not(self, probe: str) -> str | None:
        return None  # the twin answers every probe

    @staticmethod
    def _seconds(work: float | np.ndarray, rate: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.asarray(work, dtype=float) / rate
        return np.where(np.isfinite(s) & (rate > 0), s, np.inf)

    def gemm(self, gpus: np.ndarray, n: int, t: float) -> Timed:
        tflops, ok, errors = self.hw.gemm(gpus, t)
        return Timed(self._seconds(2.0 * float(n) ** 3, tflops * 1e12), errors,
                     {"checksum_ok": ok})

    def copy(self, gpus: np.ndarray, nbytes: int, t: float) -> Timed:
        tbps, errors = self.hw.hbm(gpus, t)
        return Timed(self._seconds(2.0 * nbytes, tbps * 1e12), errors)

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        busbw, errors = self.hw.allreduce(groups.flat, groups.offsets, nvlink=nvlink, t=t)
        k = groups.sizes.astype(float)
        algbw = busbw / (2.0 * (k - 1.0) / k)
        return Timed(self._seconds(float(nbytes), algbw * 1e9), errors)

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        gbps, errors = self.hw.nvlink_plane(domains, t)
        return Timed(np.zeros(len(domains)), errors, {"gbps": gbps})

    def telemetry(self, racks: np.ndarray, t: float) -> Timed:
        r = self.hw.thermal(racks, t)
        gpu_error = np.zeros(len(r.gpus), bool)
        gpu_error[list(r.errors)] = True
        return Timed(np.zeros(len(racks)), {}, {
            "flow_lpm": r.flow_lpm, "required_lpm": r.required_lpm, "shelf_kw": r.shelf_kw,
            "gpus": r.gpus, "gpu_temp_c": r.gpu_temp_c, "gpu_clock_frac": r.gpu_clock_frac,
            "gpu_error": gpu_error,
        })
