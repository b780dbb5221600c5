"""Localization of a straggler: from the suspect rank(s) to the part at fault, by a short
targeted probe through the ladder's own probes (`certify.PROBES`), on whatever backend the
job's runner gives (real ranks through a certify runner, or the digital twin): the code here
never learns which.

Per suspect GPU, two probes, each beside healthy controls measured at the same moment:
- its GPU alone: the ladder's `gemm` probe (stage 1);
- its NIC's rail: the ladder's `scaleout_allreduce` probe on a pair of it and one healthy
  reference GPU (NVLink off, so every byte crosses the suspect's NIC and cable; stage 4's
  member test).
Each figure is judged with the ladder's verdict rule (`certify.verdict.judge`) against the
median/MAD of all the GPUs probed (the controls are healthy, so the median is). The decision:
a slow or failing GEMM is the GPU; a healthy GEMM with a slow pair is the NIC (`bad_cable`, or
`nic_dead` when the pair errors or runs at DOWN_REL or less); when both fall short, the one
further below its reference (a slow GPU also slows its own all-reduce, but by no more than
its compute; a slow NIC does not slow the GEMM at all); neither is "not localized". So a slow
NIC is not blamed on its GPU.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rackscale.certify import (
    DOWN_REL,
    PROBES,
    Backend,
    Groups,
    Judgement,
    Runner,
    RunnerBackend,
    Scope,
    Thresholds,
    fleet_baseline,
    judge,
    repeat_median,
)
from rackscale.faults import BAD_CABLE, GPU_DEAD, NIC_DEAD, SLOW_GPU
from rackscale.fleet import Topology

OpenBackend = Callable[[], AbstractContextManager[Backend]]
MIN_PROBED = 3  # GPUs per probe: with one faulty among three the median is a healthy one


@dataclass(slots=True, kw_only=True)
class Localized:
    """The probe's answer: the part at fault (None: not localized) and what it rests on."""

    gpu: str | None  # the suspect GPU whose part is at fault
    component: str | None  # that part: the GPU itself or its NIC
    kind: str | None  # its fault kind (DESIGN's names: slow_gpu, bad_cable, ...)
    confidence: float = 0.0
    seconds: float = 0.0  # wall time of the probe, measured
    evidence: dict[str, Any] = field(default_factory=dict)


def on_runner(topo: Topology, make_runner: Callable[[], Runner]) -> OpenBackend:
    """Backends opened on a certify runner made per probe: the ladder's real backend on top
    of it, its agents stopped after the probe."""
    @contextlib.contextmanager
    def opened() -> Iterator[Backend]:
        runner = make_runner()
        try:
            yield RunnerBackend(topo, runner)
        finally:
            runner.close()
    return opened


@dataclass(slots=True)
class _Sampled:
    """One probe's repeats over the probed elements, judged."""

    judgement: Judgement
    unit: str
    source: str


class Localizer:
    """Targeted probes of suspects on a backend opened per use (a runner's agents start for
    the probe and stop after it: they must not hold the job's CPU shares or memory)."""

    def __init__(self, topo: Topology, open_backend: OpenBackend,
                 thresholds: Mapping[str, Thresholds], *, repeats: int = 2,
                 nbytes: int = 512 << 10) -> None:
        self.topo, self.thresholds = topo, thresholds
        self.repeats, self.nbytes = repeats, nbytes
        self._backend = open_backend
        self._index = {g: i for i, g in enumerate(topo.gpu_ids)}

    def localize(self, candidates: Sequence[str], healthy: Sequence[str]) -> Localized:
        """Probe each candidate GPU beside controls taken from `healthy` (GPUs believed
        good: the job's other ranks, its spares); the worst part found, or not localized."""
        t0 = time.monotonic()
        unknown = self._unknown_ids(candidates, healthy)
        if unknown:
            return Localized(gpu=None, component=None, kind=None,
                             evidence={"error": f"not in the fleet: {', '.join(unknown)}"})
        ref, controls = self._controls(candidates, healthy)
        probed = [*candidates, *controls]
        if ref is None or len(probed) < MIN_PROBED:
            return Localized(gpu=None, component=None, kind=None, evidence={
                "error": f"too few healthy GPUs to compare with ({len(healthy)}); "
                         f"a probe needs {MIN_PROBED} GPUs and a reference"})
        with self._backend() as backend:
            # the reference too: one more healthy figure, and its agent starts with the rest
            gemm = self._gemm(backend, [*probed, ref])
            t1 = time.monotonic()
            pair = self._pairs(backend, probed, ref)
            t2 = time.monotonic()
        out = self._decide(list(candidates), gemm, pair)
        out.seconds = round(time.monotonic() - t0, 4)
        # the GEMM phase includes starting the probe's ranks (a runner's agents)
        out.evidence |= {"reference": ref, "controls": controls, "probe_s": out.seconds,
                         "gpu_probe_s": round(t1 - t0, 4), "nic_probe_s": round(t2 - t1, 4),
                         gemm.source: True}
        return out

    def _unknown_ids(self, *groups: Sequence[str]) -> list[str]:
        return sorted({g for grp in groups for g in grp if g not in self._index})

    def _controls(self, candidates: Sequence[str], healthy: Sequence[str],
                  ) -> tuple[str | None, list[str]]:
        """The reference GPU of the pair tests (one on the candidates' rail first: on a
        rail-optimised network that pair crosses only the rail's leaves) and the controls."""
        topo, idx = self.topo, self._index
        rails = {int(topo.gpu_slot[idx[c]]) for c in candidates}
        pool = [g for g in healthy if g not in candidates]
        pool.sort(key=lambda g: int(topo.gpu_slot[idx[g]]) not in rails)
        if not pool:
            return None, []
        ref, rest = pool[0], pool[1:]
        return ref, rest[:max(1, MIN_PROBED - len(candidates))]

    def _judged(self, values: list[np.ndarray], errors: list[dict[int, str]], probe: str,
                unit: str, source: str) -> _Sampled:
        samples = np.stack(values)
        mask = ~np.isfinite(samples)
        merged = {k: v for e in errors for k, v in e.items()}
        base = fleet_baseline(repeat_median(samples, mask), np.zeros(samples.shape[1], np.int64),
                              min_samples=MIN_PROBED)
        return _Sampled(judge(samples, mask, merged, base, self.thresholds[probe]), unit,
                        source)

    def _gemm(self, backend: Backend, probed: list[str]) -> _Sampled:
        probe = PROBES.create("gemm", backend)
        gpus = np.asarray([self._index[g] for g in probed])
        runs = [probe.run(Scope(gpus=gpus)) for _ in range(self.repeats)]
        return self._judged([m.values for m in runs], [m.errors for m in runs], "gemm",
                            runs[0].unit, runs[0].source)

    def _pairs(self, backend: Backend, probed: list[str], ref: str) -> _Sampled:
        """Each probed GPU in an all-reduce pair with the reference, one pair at a time (the
        pairs share the reference, and a runner runs only disjoint groups together)."""
        probe = PROBES.create("scaleout_allreduce", backend)
        values = np.full((self.repeats, len(probed)), np.nan)
        errors: list[dict[int, str]] = [{} for _ in range(self.repeats)]
        unit, source = probe.unit, ""
        for k in range(self.repeats):
            for i, g in enumerate(probed):
                groups = Groups.of([[self._index[g], self._index[ref]]])
                m = probe.run(Scope(groups=groups, size_bytes=self.nbytes))
                values[k, i], source = m.values[0], m.source
                if 0 in m.errors:
                    errors[k][i] = m.errors[0]
        return self._judged(list(values), errors, "scaleout_allreduce", unit, source)

    def _decide(self, candidates: list[str], gemm: _Sampled, pair: _Sampled) -> Localized:
        topo, jg, jp = self.topo, gemm.judgement, pair.judgement
        found: list[Localized] = []
        for i, g in enumerate(candidates):
            ev = {"gpu_probe": jg.evidence(i, gemm.unit, gemm.source),
                  "nic_probe": jp.evidence(i, pair.unit, pair.source)}
            nic = topo.ids[int(topo.gpu_nic[self._index[g]])]
            gpu_bad = i in jg.errors or bool(jg.failed[i])
            nic_bad = i in jp.errors or bool(jp.failed[i])
            if gpu_bad and nic_bad and i not in jg.errors:
                # Both short: the one further below its reference is the cause (a slow GPU
                # slows its own all-reduce by no more than its compute; a NIC, not at all).
                gpu_bad = float(np.nan_to_num(jg.rel[i])) <= float(np.nan_to_num(jp.rel[i]))
            if gpu_bad:
                kind = GPU_DEAD if i in jg.errors else SLOW_GPU
                found.append(Localized(gpu=g, component=g, kind=kind,
                                       confidence=jg.confidence(i), evidence=ev))
            elif nic_bad:
                down = i in jp.errors or jp.fail_rel(i) <= DOWN_REL
                found.append(Localized(gpu=g, component=nic, kind=NIC_DEAD if down else BAD_CABLE,
                                       confidence=jp.confidence(i), evidence=ev))
        per = {g: {"gemm_rel": round(float(np.nan_to_num(jg.rel[i])), 4),
                   "pair_rel": round(float(np.nan_to_num(jp.rel[i])), 4)}
               for i, g in enumerate([*candidates])}
        if not found:
            return Localized(gpu=None, component=None, kind=None,
                             evidence={"probed": per, "verdict": "GPU and NIC both healthy"})
        worst = min(found, key=lambda f: min(v for v in (per[f.gpu or ""].values())))
        worst.evidence |= {"probed": per, "also_failed": [f.component for f in found
                                                          if f is not worst]}
        return worst
