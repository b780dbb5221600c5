"""The detectors as pure rules: timeouts learned from the first steps, the hang's culprit,
fail-stop's cause, and the straggler score (property tests over random step times)."""

from __future__ import annotations

import random
from collections.abc import Set as AbstractSet

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.recovery import (
    DetectConfig,
    JobConfigError,
    RankBeats,
    StragglerDetector,
    Symptom,
    find_fail_stop,
    find_hang,
    make_job_config,
    timeout_of,
)


def _beats(rank: int, times: list[float], phase_last: str = "step") -> RankBeats:
    rb = RankBeats(rank=rank)
    rb.add({"phase": "restored", "step": 0, "t": times[0] - 30})  # a slow start-up
    for i, t in enumerate(times, 1):
        rb.add({"phase": "sync", "step": i, "t": t - 0.01, "compute_s": 0.01})
        rb.add({"phase": "step", "step": i, "t": t})
    if phase_last == "sync":
        rb.add({"phase": "sync", "step": len(times) + 1, "t": times[-1] + 0.5,
                "compute_s": 0.01})
    return rb


def test_timeout_is_the_startup_one_until_warm_then_learned_with_a_floor() -> None:
    cfg = DetectConfig(warmup_steps=3, timeout_factor=5, hang_floor_s=2, startup_timeout_s=60)
    assert timeout_of(_beats(0, [1.0, 2.0]), cfg) == 60
    # The longest gap once stepping (step n -> sync n+1: 0.99 s; the 30 s start-up does not
    # count), times 5.
    assert timeout_of(_beats(0, [1.0, 2.0, 3.0, 4.0]), cfg) == pytest.approx(5 * 0.99)
    assert timeout_of(_beats(0, [1.0, 1.1, 1.2, 1.3]), cfg) == 2  # the floor


def test_hang_blames_the_stopped_or_least_advanced_rank_not_its_waiting_peers() -> None:
    cfg = DetectConfig(warmup_steps=2, hang_floor_s=1, timeout_factor=2)
    waiting = _beats(0, [1, 2, 3, 4], phase_last="sync")  # entered step 5's all-reduce
    culprit = _beats(1, [1, 2, 3, 4])  # never finished step 5's compute
    assert find_hang([waiting, culprit], now=4.5, launched_at=0, cfg=cfg) is None
    s = find_hang([waiting, culprit], now=20, launched_at=0, cfg=cfg)
    assert s is not None and s.kind is Symptom.HANG and s.rank == 1
    # The OS's word beats progress: a rank reported stopped is the culprit.
    s = find_hang([waiting, culprit], now=20, launched_at=0, cfg=cfg, stopped=lambda r: r == 0)
    assert s is not None and s.rank == 0 and s.evidence["os_stopped"]


def test_fail_stop_blames_the_killed_rank_before_peers_whose_collective_failed() -> None:
    ranks = [_beats(0, [1, 2]), _beats(1, [1, 2]), _beats(2, [1, 2])]
    assert find_fail_stop([None, None, None], ranks) is None
    s = find_fail_stop([1, -9, None], ranks)
    assert s is not None and s.rank == 1 and s.evidence["signal"] == 9
    assert find_fail_stop([0, None, None], ranks) is None  # a rank that finished is no fault
    s = find_fail_stop([0, 1, None], ranks)
    assert s is not None and s.rank == 1 and s.evidence["exit_code"] == 1


def _feed(det: StragglerDetector, times: list[list[float]],
          ckpt: AbstractSet[tuple[int, int]] = frozenset()) -> tuple[int, int] | None:
    """Feed per-step compute times [step][rank] (beats of (step, rank) in `ckpt` say the
    rank's checkpoint work overlapped that step); (rank, step) of the first flag."""
    ranks = [RankBeats(rank=r) for r in range(len(times[0]))]
    for step, row in enumerate(times, 1):
        for r, t in enumerate(row):
            ranks[r].add({"phase": "sync", "step": step, "t": float(step), "compute_s": t,
                          "ckpt": (step, r) in ckpt})
        got = det.feed(ranks)
        if got is not None:
            return got.rank, step
    return None


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 16), seed=st.integers(0, 2**32 - 1),
       noise=st.floats(0.0, 0.15))
def test_a_clean_run_of_500_steps_is_never_flagged(world: int, seed: int, noise: float) -> None:
    rnd = random.Random(seed)
    times = [[0.02 * (1 + rnd.uniform(-noise, noise)) for _ in range(world)]
             for _ in range(500)]
    assert _feed(StragglerDetector(world, DetectConfig()), times) is None


@settings(max_examples=60, deadline=None)
@given(world=st.integers(2, 16), seed=st.integers(0, 2**32 - 1),
       noise=st.floats(0.0, 0.05), start=st.integers(0, 100))
def test_a_rank_slowed_1_5x_is_flagged_within_ten_steps(world: int, seed: int, noise: float,
                                                        start: int) -> None:
    rnd = random.Random(seed)
    slow = rnd.randrange(world)
    cfg = DetectConfig()
    times = [[0.02 * (1 + rnd.uniform(-noise, noise)) * (1.5 if r == slow and s >= start
                                                          else 1.0) for r in range(world)]
             for s in range(start + 30)]
    got = _feed(StragglerDetector(world, cfg), times)
    assert got is not None and got[0] == slow
    # Counted from the first slow step (or from the end of warm-up, when it starts earlier).
    assert got[1] - max(start + 1, cfg.warmup_steps + 1) < 10


@settings(max_examples=80, deadline=None)
@given(world=st.integers(2, 12), seed=st.integers(0, 2**32 - 1), noise=st.floats(0.0, 0.05),
       every=st.integers(2, 12), after=st.integers(1, 6), cost=st.floats(1.5, 4.0),
       start=st.integers(0, 60))
def test_steps_slowed_by_a_ranks_own_checkpoint_work_never_flag_it(
        world: int, seed: int, noise: float, every: int, after: int, cost: float,
        start: int) -> None:
    """The rank that commits checkpoints (its push to the region tier runs in its process)
    is `cost` x slower for `after` steps after each save, and its beats say so: in 300 steps
    it is never flagged; a rank that is truly 1.5x slow from `start` on still is, within 10
    steps, though the checkpointing rank's steps are slow then too."""
    rnd = random.Random(seed)
    writer, after = rnd.randrange(world), min(after, every - 1)
    ckpt = {(s, writer) for s in range(1, 301) if 0 < s % every <= after}

    def times(slow: int | None) -> list[list[float]]:
        return [[0.02 * (1 + rnd.uniform(-noise, noise))
                 * (cost if (s, r) in ckpt else 1.0)
                 * (1.5 if r == slow and s > start else 1.0) for r in range(world)]
                for s in range(1, 301)]

    cfg = DetectConfig()
    assert _feed(StragglerDetector(world, cfg), times(None), ckpt) is None
    slow = rnd.choice([r for r in range(world) if r != writer])
    got = _feed(StragglerDetector(world, cfg), times(slow), ckpt)
    assert got is not None and got[0] == slow
    assert got[1] - max(start + 1, cfg.warmup_steps + 1) < 10


def test_job_settings_name_the_bad_field() -> None:
    with pytest.raises(JobConfigError, match=r"detect\.straggler_threshold"):
        make_job_config(command=["x"], gpus=2, detect={"straggler_threshold": 1.5})
    with pytest.raises(JobConfigError, match="gpus"):
        make_job_config(command=["x"], gpus=0)
