"""Localization as a rule, on the digital twin (the same probes and code path as on the lab),
and the collective detector on synthetic beats: property tests over random faults, places,
severities and noise."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.certify import THRESHOLDS, TwinBackend
from rackscale.faults import Fault, FaultsFile, TwinHardware
from rackscale.fleet import Topology, load_fleet
from rackscale.lab import default_fleet_path
from rackscale.recovery import CollectiveDetector, DetectConfig, Localizer, RankBeats, Symptom

TOPO = Topology.build(load_fleet(default_fleet_path()))  # 8 GPUs: 2 racks x 2 trays x 2
JOB, SPARES = TOPO.gpu_ids[:4], TOPO.gpu_ids[4:7]


def _localizer(faults: list[Fault], seed: int) -> Localizer:
    hw = TwinHardware(TOPO, FaultsFile(faults=faults), seed=seed)
    return Localizer(TOPO, lambda: contextlib.nullcontext(TwinBackend(hw)), THRESHOLDS)


def _nic(gpu: str) -> str:
    return TOPO.ids[int(TOPO.gpu_nic[TOPO.gpu_ids.index(gpu)])]


@settings(max_examples=100, deadline=None)
@given(victim=st.sampled_from(JOB), kind=st.sampled_from(["slow_gpu", "bad_cable"]),
       severity=st.floats(0.08, 0.7), job_wide=st.booleans(), seed=st.integers(0, 2**16))
def test_a_slow_gpu_or_nic_is_named_and_a_slow_nic_is_never_blamed_on_its_gpu(
        victim: str, kind: str, severity: float, job_wide: bool, seed: int) -> None:
    target = victim if kind == "slow_gpu" else _nic(victim)
    loc = _localizer([Fault(target=target, kind=kind, severity=severity)], seed)
    # A rank flagged on its own (compute) is probed beside healthy peers; a slow collective
    # makes every rank of the job a candidate, probed beside the spares.
    cands = list(JOB) if job_wide else [victim]
    healthy = list(SPARES) if job_wide else [g for g in JOB if g != victim] + list(SPARES)
    got = loc.localize(cands, healthy)
    assert (got.gpu, got.component, got.kind) == (victim, target, kind), got.evidence
    assert got.evidence["simulated"] is True and got.seconds >= 0


@settings(max_examples=15, deadline=None)
@given(victim=st.sampled_from(JOB), seed=st.integers(0, 2**16))
def test_healthy_parts_are_not_localized(victim: str, seed: int) -> None:
    got = _localizer([], seed).localize([victim], [g for g in TOPO.gpu_ids if g != victim])
    assert got.gpu is None and got.component is None
    assert got.evidence["verdict"] == "GPU and NIC both healthy"


def test_too_few_healthy_gpus_to_compare_is_not_localized() -> None:
    got = _localizer([Fault(target=JOB[0], kind="slow_gpu", severity=0.3)], 0).localize(
        [JOB[0]], [JOB[1]])
    assert got.gpu is None and "too few healthy GPUs" in got.evidence["error"]
    unknown = _localizer([], 0).localize(["nowhere/r01/c01/gpu0"], list(SPARES))
    assert unknown.gpu is None and "not in the fleet" in unknown.evidence["error"]


def _feed(det: CollectiveDetector, compute: list[list[float]], coll: list[float],
          busy: frozenset[int] = frozenset()) -> tuple[int, tuple[int, ...]] | None:
    """Beats of a synchronous job: each rank enters the collective after its compute; every
    rank leaves when the last one entered plus the collective time. Rank 0 marks the steps in
    `busy` as overlapping its checkpoint work."""
    world = len(compute[0])
    ranks = [RankBeats(rank=r) for r in range(world)]
    t = 0.0
    for step, (row, c) in enumerate(zip(compute, coll, strict=True), 1):
        enter = [t + x for x in row]
        leave = max(enter) + c
        for r in range(world):
            ckpt = {"ckpt": True} if r == 0 and step in busy else {}
            ranks[r].add({"phase": "sync", "step": step, "t": enter[r], "compute_s": row[r],
                          **ckpt})
            ranks[r].add({"phase": "step", "step": step, "t": leave})
        t = leave
        got = det.feed(ranks)
        if got is not None:
            assert got.kind is Symptom.STRAGGLER and got.evidence["scope"] == "collective"
            return step, got.candidates
    return None


def _job(world: int, steps: int, rnd: random.Random, noise: float,
         ) -> tuple[list[list[float]], list[float]]:
    compute = [[0.03 * (1 + rnd.uniform(-noise, noise)) for _ in range(world)]
               for _ in range(steps)]
    # every 5th step also saves a checkpoint inside the step: a spike the smoothing absorbs
    coll = [0.06 * (1 + rnd.uniform(-noise, noise)) + (0.2 if s % 5 == 4 else 0.0)
            for s in range(steps)]
    return compute, coll


@settings(max_examples=50, deadline=None)
@given(world=st.integers(2, 16), seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.2))
def test_a_clean_job_is_never_flagged_for_its_collective(world: int, seed: int,
                                                         noise: float) -> None:
    compute, coll = _job(world, 500, random.Random(seed), noise)
    assert _feed(CollectiveDetector(world, DetectConfig()), compute, coll) is None


@settings(max_examples=50, deadline=None)
@given(world=st.integers(2, 16), seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.1),
       start=st.integers(8, 60), slow=st.floats(2.0, 10.0))
def test_a_slowed_collective_flags_every_rank_within_ten_steps(
        world: int, seed: int, noise: float, start: int, slow: float) -> None:
    """From step `start` (after the warm-up and the first smoothed figures: a job slow from
    its first step has no best of its own, see the next test)."""
    compute, coll = _job(world, start + 40, random.Random(seed), noise)
    coll = [c * (slow if s >= start else 1.0) for s, c in enumerate(coll)]
    got = _feed(CollectiveDetector(world, DetectConfig()), compute, coll)
    assert got is not None and got[1] == tuple(range(world))
    assert got[0] - (start + 1) < 10


@settings(max_examples=30, deadline=None)
@given(world=st.integers(2, 16), seed=st.integers(0, 2**32 - 1), factor=st.floats(2.0, 10.0))
def test_a_rank_slow_in_compute_does_not_raise_the_collective(world: int, seed: int,
                                                              factor: float) -> None:
    rnd = random.Random(seed)
    compute, coll = _job(world, 200, rnd, 0.05)
    victim = rnd.randrange(world)
    for s in range(20, 200):
        compute[s][victim] *= factor  # the others now wait for it inside the collective
    assert _feed(CollectiveDetector(world, DetectConfig()), compute, coll) is None


@pytest.mark.parametrize("best", [None, 0.06])
def test_a_fault_present_from_the_attempts_start_is_seen_against_the_jobs_best(
        best: float | None) -> None:
    compute, coll = _job(4, 60, random.Random(1), 0.02)
    got = _feed(CollectiveDetector(4, DetectConfig(), best=best), compute,
                [c * 5 for c in coll])
    assert (got is None) == (best is None)  # without the earlier best, slow looks normal


def test_steps_that_overlap_a_checkpoint_push_are_not_scored() -> None:
    """A push to the tiers that runs for several steps after each save (longer than the
    smoothing) slows those steps' collective; marked, they are skipped, unmarked they flag."""
    compute, coll = _job(4, 200, random.Random(3), 0.02)
    busy = frozenset(s for s in range(1, 201) if s % 20 in (1, 2, 3, 4, 5, 6, 7))
    coll = [c + (0.3 if s + 1 in busy else 0.0) for s, c in enumerate(coll)]
    assert _feed(CollectiveDetector(4, DetectConfig()), compute, coll, busy) is None
    assert _feed(CollectiveDetector(4, DetectConfig()), compute, coll) is not None
