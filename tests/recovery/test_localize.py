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


# --- the decision, rule by rule (one seed: the twin's figures are then fixed) -----------------

def _one(faults: list[Fault], victim: str = JOB[0]):
    """Localize `victim` alone beside the job's other GPUs and the spares."""
    return _localizer(faults, 0).localize([victim], [*JOB[1:], *SPARES])


def _named(got) -> tuple[str | None, str | None, str | None]:
    return got.gpu, got.component, got.kind


def test_a_gpu_whose_probe_errors_is_dead_and_a_nic_whose_pair_errors_is_dead() -> None:
    v = JOB[0]
    got = _one([Fault(target=v, kind="gpu_dead")])
    assert (*_named(got), got.confidence) == (v, v, "gpu_dead", 0.99)
    got = _one([Fault(target=_nic(v), kind="nic_dead")])
    assert (*_named(got), got.confidence) == (v, _nic(v), "nic_dead", 0.99)
    assert got.evidence["probed"] == {v: {"gemm_rel": 1.0027, "pair_rel": 0.0}}


def test_a_link_at_or_below_the_down_figure_is_a_dead_nic_above_it_a_bad_cable() -> None:
    v = JOB[0]
    assert _named(_one([Fault(target=_nic(v), kind="bad_cable", severity=0.05)])) == (
        v, _nic(v), "nic_dead")  # DOWN_REL: 5% of its reference
    assert _named(_one([Fault(target=_nic(v), kind="bad_cable", severity=0.06)])) == (
        v, _nic(v), "bad_cable")


def test_when_gpu_and_nic_both_fall_short_the_one_further_below_is_blamed() -> None:
    v = JOB[0]
    got = _one([Fault(target=v, kind="slow_gpu", severity=0.3),
                Fault(target=_nic(v), kind="bad_cable", severity=0.6)])
    assert _named(got) == (v, v, "slow_gpu")
    assert got.evidence["probed"] == {v: {"gemm_rel": 0.3016, "pair_rel": 0.5994}}
    got = _one([Fault(target=v, kind="slow_gpu", severity=0.6),
                Fault(target=_nic(v), kind="bad_cable", severity=0.3)])
    assert _named(got) == (v, _nic(v), "bad_cable")


def test_of_several_faulty_candidates_the_worst_is_named_and_the_others_listed() -> None:
    faults = [Fault(target=JOB[0], kind="slow_gpu", severity=0.3),
              Fault(target=_nic(JOB[1]), kind="bad_cable", severity=0.5)]
    got = _localizer(faults, 0).localize(list(JOB), list(SPARES))
    assert _named(got) == (JOB[0], JOB[0], "slow_gpu")
    assert got.evidence["also_failed"] == [_nic(JOB[1])]
    assert got.evidence["probed"][JOB[1]] == {"gemm_rel": 1.0012, "pair_rel": 0.5007}
    faults = [Fault(target=JOB[0], kind="slow_gpu", severity=0.6),
              Fault(target=_nic(JOB[1]), kind="bad_cable", severity=0.3)]
    got = _localizer(faults, 0).localize(list(JOB), list(SPARES))
    assert _named(got) == (JOB[1], _nic(JOB[1]), "bad_cable")
    assert got.evidence["also_failed"] == [JOB[0]]


def test_the_reference_is_on_the_candidates_rail_and_the_controls_fill_the_probe_to_three(
        ) -> None:
    # Rails: gpu0 of each tray on rail 0, gpu1 on rail 1.
    got = _one([])
    assert got.evidence["reference"] == "lab/r01/c02/gpu0"
    assert got.evidence["controls"] == ["lab/r02/c01/gpu0", "lab/r02/c02/gpu0"]
    got = _localizer([], 0).localize([JOB[1]], [JOB[0], *SPARES])
    assert got.evidence["reference"] == "lab/r02/c01/gpu1"
    assert got.evidence["controls"] == ["lab/r01/c01/gpu0", "lab/r02/c01/gpu0"]
    got = _localizer([], 0).localize(list(JOB), list(SPARES))  # at least one control
    assert got.evidence["reference"] == SPARES[0] and got.evidence["controls"] == [SPARES[1]]
    assert set(got.evidence["probed"]) == set(JOB)


def test_a_probe_needs_three_gpus_and_a_reference_and_a_candidate_is_never_its_control(
        ) -> None:
    v = JOB[0]
    assert _localizer([], 0).localize([v], list(SPARES)).evidence["verdict"] == (
        "GPU and NIC both healthy")  # the reference and two controls
    got = _localizer([], 0).localize([v], [v, *SPARES[:2]])
    assert got.gpu is None and got.evidence["error"] == (
        "too few healthy GPUs to compare with (3); a probe needs 3 GPUs and a reference")
    assert "verdict" in _localizer([], 0).localize(list(JOB[:2]), list(SPARES[:2])).evidence
    assert "error" in _localizer([], 0).localize(list(JOB[:2]), list(SPARES[:1])).evidence


class _Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def monotonic(self) -> float:
        return self.times.pop(0)


def test_the_probe_reports_its_wall_time_and_each_phases(monkeypatch: pytest.MonkeyPatch,
                                                         ) -> None:
    from rackscale.recovery import localize

    monkeypatch.setattr(localize, "time", _Clock(10.0, 10.1234567, 10.3456789, 10.56789012))
    got = _one([Fault(target=JOB[0], kind="slow_gpu", severity=0.3)])
    assert got.seconds == got.evidence["probe_s"] == 0.5679
    assert (got.evidence["gpu_probe_s"], got.evidence["nic_probe_s"]) == (0.1235, 0.2222)


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
       start=st.integers(8, 60), slow=st.floats(2.5, 10.0))
def test_a_slowed_collective_flags_every_rank_within_ten_steps(
        world: int, seed: int, noise: float, start: int, slow: float) -> None:
    """From step `start` (after the warm-up and the first smoothed figures: a job slow from
    its first step has no best of its own, see the next test). From 2.5x: at 2x the 60 ms
    collective gains 60 ms, only 10 ms over the detector's 50 ms floor, which the 10% noise
    can cross for a step and restart the count (1 case in 3,000 past ten steps)."""
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


# --- the decision on exact figures (the twin's noise never lands on a boundary) ----------------

def _decided(gemm: list[float], pair: list[float]):
    """`_decide` for candidate 0 beside two controls, on figures given exactly (two repeats
    of the same values, each relative to the controls' 1.0)."""
    import numpy as np

    loc = _localizer([], 0)
    g = loc._judged([np.array(gemm)] * 2, [{}, {}], "gemm", "TFLOP/s", "twin")
    p = loc._judged([np.array(pair)] * 2, [{}, {}], "scaleout_allreduce", "GB/s", "twin")
    return loc._decide([JOB[0]], g, p)


def test_a_tie_between_gpu_and_nic_shortfall_blames_the_gpu() -> None:
    # A slow GPU slows its own all-reduce by no more than its compute, so an all-reduce short
    # by exactly as much as the compute is the GPU's doing.
    assert _named(_decided([0.5, 1.0, 1.0], [0.5, 1.0, 1.0])) == (JOB[0], JOB[0], "slow_gpu")
    assert _named(_decided([0.5, 1.0, 1.0], [0.49, 1.0, 1.0]))[2] == "bad_cable"


def test_a_link_exactly_at_the_down_figure_is_dead() -> None:
    from rackscale.certify import DOWN_REL

    v = JOB[0]
    assert _named(_decided([1.0, 1.0, 1.0], [DOWN_REL, 1.0, 1.0])) == (v, _nic(v), "nic_dead")
    assert _named(_decided([1.0, 1.0, 1.0], [DOWN_REL + 0.01, 1.0, 1.0]))[2] == "bad_cable"


def test_a_failing_gpu_beside_a_short_but_passing_nic_is_the_gpu() -> None:
    # GEMM fails 2% short of its reference, the all-reduce 4%: at 0.97 and 0.965 the NIC is
    # further below but still passing, so only the GPU failed and the two are not compared.
    v = JOB[0]
    got = _decided([0.97, 1.0, 1.0], [0.965, 1.0, 1.0])
    assert got.evidence["probed"] == {v: {"gemm_rel": 0.97, "pair_rel": 0.965}}
    assert _named(got) == (v, v, "slow_gpu")


def test_a_refused_probe_took_no_time_and_has_no_confidence() -> None:
    got = _localizer([], 0).localize(["nowhere/r01/c01/gpu0"], list(SPARES))
    assert (got.confidence, got.seconds) == (0.0, 0.0)


def test_options_are_passed_by_name() -> None:
    from rackscale.recovery.localize import Localized

    with pytest.raises(TypeError):
        Localizer(TOPO, lambda: contextlib.nullcontext(None), THRESHOLDS, 3)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Localized(None, None, None)  # type: ignore[misc]  # the rule under test


def test_a_probe_on_a_runner_closes_the_runner_after_use() -> None:
    """The agents a probe starts must not outlive it (they would hold the job's CPU and
    memory): the backend opened on a runner closes it when the probe ends, or fails."""
    from rackscale.recovery.localize import on_runner

    closed: list[bool] = []

    class Runner:  # stands in for a runner's lifetime only; real runners run in test_lab_*
        def close(self) -> None:
            closed.append(True)

    opened = on_runner(TOPO, Runner)  # type: ignore[arg-type]
    with opened() as backend:
        assert backend is not None and not closed
    assert closed == [True]
    with pytest.raises(RuntimeError), opened():
        raise RuntimeError("probe failed")
    assert closed == [True, True]
