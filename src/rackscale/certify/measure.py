"""What flows between probes and backends: scopes, groups, raw timings and measurements.

A backend answers raw questions (how long did this GEMM, copy or all-reduce take?); a probe
turns the answer into the figure (TFLOPS, TB/s, bus bandwidth) with one formula for both
backends, so the digital twin and real hardware share the code path from timing to verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rackscale.provenance import Provenance

# The old name of a backend's provenance, kept for code written against it (the runners).
BackendName = Provenance


@dataclass(frozen=True, slots=True)
class Groups:
    """Groups of GPU numbers, stored flat: group i is flat[offsets[i]:offsets[i+1]]."""

    flat: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, groups: Sequence[np.ndarray | Sequence[int]]) -> Groups:
        arrays = [np.sort(np.asarray(g, dtype=np.int64)) for g in groups]
        if any(len(a) < 2 for a in arrays):
            raise ValueError("a collective needs at least 2 GPUs (world size >= 2)")
        sizes = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.zeros(len(arrays) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        flat = np.concatenate(arrays) if arrays else np.zeros(0, np.int64)
        return cls(flat=flat, offsets=offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def members(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i]:self.offsets[i + 1]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Scope:
    """What one probe run covers. Per-GPU probes read `gpus`, collectives `groups`,
    telemetry `racks`, NVLink plane checks `domains`; `t` is the (simulated) time in s.
    NVLink on or off is the probe's (nvlink_allreduce / scaleout_allreduce), not the scope's."""

    gpus: np.ndarray | None = None
    groups: Groups | None = None
    racks: np.ndarray | None = None
    domains: np.ndarray | None = None
    size_bytes: int = 1 << 30
    gemm_n: int | None = None  # default: the backend's
    copy_bytes: int | None = None
    t: float = 0.0


@dataclass(frozen=True, slots=True)
class Timed:
    """A backend's raw answer: seconds per operation per scope element, plus what it saw."""

    seconds: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement:
    probe: str
    unit: str
    backend: Provenance  # which backend answered: the twin or real hardware
    values: np.ndarray  # one figure per scope element (NaN where it errored)
    errors: dict[int, str] = field(default_factory=dict)
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    t: float = 0.0

    @property
    def source(self) -> str:
        return Provenance(self.backend).basis


class Backend(Protocol):
    """Where probes run: the digital twin or real hardware through PyTorch. Its `name` is its
    provenance, what every figure it answers is labelled with."""

    name: Provenance
    gemm_n: int  # matrix size the backend's GEMM probe uses by default
    copy_bytes: int  # buffer size of its memory-bandwidth probe

    def why_not(self, probe: str) -> str | None:
        """None when `probe` can run here, else the reason it cannot."""

    def gemm(self, gpus: np.ndarray, n: int, t: float) -> Timed:
        """n x n x n matrix product per GPU; extra['checksum_ok'] says the result verified."""

    def copy(self, gpus: np.ndarray, nbytes: int, t: float) -> Timed:
        """Device-memory copy of nbytes per GPU (reads nbytes and writes nbytes)."""

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        """One all-reduce of nbytes per group; NVLink off forces the scale-out network."""

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        """Per switch tray of each domain, bandwidth through it (GB/s) in extra['gbps']."""

    def telemetry(self, racks: np.ndarray, t: float) -> Timed:
        """Coolant flow, shelf power, GPU temperatures and clocks of racks (in extra)."""
