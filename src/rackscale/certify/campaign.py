"""The campaign: repeats of every probe spread over a soak window, with a simulated clock
and counters of what the campaign would cost on the real cluster.

Repeats of one batch run `soak_s / repeats` apart, so `repeats` samples cover one soak window.
An intermittent fault with a cycle no longer than the window and a duty between
1/repeats and 1 - 1/repeats is then seen both present and absent (how flapping is caught).
Tests of one batch run in parallel on disjoint parts; batches run one after another.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from rackscale.certify.measure import Scope
from rackscale.certify.probes import Probe

# Wall time of one run of each probe on the real cluster (launch + warmup + timed loop);
# modelling figures for the campaign-time estimate.
RUN_SECONDS = {"gemm": 60.0, "hbm": 20.0, "thermal": 60.0, "nvlink_plane": 5.0,
               "nvlink_allreduce": 15.0, "scaleout_allreduce": 15.0}
COLLECTIVES = ("nvlink_allreduce", "scaleout_allreduce")


class ProbeFailed(Exception):
    """A probe raised: the ladder turns this into a FAIL finding that carries the error."""

    def __init__(self, probe: str, error: BaseException) -> None:
        super().__init__(f"probe {probe} raised {type(error).__name__}: {error}")
        self.probe = probe
        self.error = error


@dataclass(slots=True)
class Sampled:
    samples: np.ndarray  # [repeats, n]
    error_mask: np.ndarray  # [repeats, n]
    errors: dict[int, str]  # first error per element
    extra: list[dict[str, np.ndarray]]  # per repeat
    unit: str
    source: str  # "measured" | "simulated"


@dataclass(slots=True, kw_only=True)
class Campaign:
    repeats: int
    soak_s: float
    now: float = 0.0
    batches: int = 0
    collective_tests: int = 0  # distinct group tests
    collective_runs: int = 0  # including repeats
    probe_runs: dict[str, int] = field(default_factory=dict)

    def sample(self, probe: Probe, scope: Scope, n: int) -> Sampled:
        """Run `probe` `repeats` times on `scope` (n elements), one soak window of time."""
        spacing = max(self.soak_s / self.repeats, RUN_SECONDS.get(probe.name, 30.0))
        rows, masks, extra = [], [], []
        errors: dict[int, str] = {}
        unit, source = "", "simulated"
        for i in range(self.repeats):
            try:
                m = probe.run(replace(scope, t=self.now + i * spacing))
            except Exception as err:  # a probe that raises is a FAIL finding, never a skip
                raise ProbeFailed(probe.name, err) from err
            vals = np.asarray(m.values, dtype=float)
            mask = np.zeros(vals.shape, bool)
            for pos, msg in m.errors.items():
                mask[pos] = True
                errors.setdefault(pos, msg)
            rows.append(vals)
            masks.append(mask)
            extra.append(m.extra)
            unit, source = m.unit, m.source
        self.now += self.repeats * spacing
        self.batches += 1
        self.probe_runs[probe.name] = self.probe_runs.get(probe.name, 0) + self.repeats * n
        if probe.name in COLLECTIVES:
            self.collective_tests += n
            self.collective_runs += n * self.repeats
        return Sampled(np.stack(rows), np.stack(masks), errors, extra, unit, source)
