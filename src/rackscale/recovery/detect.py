"""The detectors: pure functions of the ranks' beats and exit codes (no processes here), so
each rule is tested on its own and the supervisor only asks them.

- fail-stop: a rank's process ended before the job did;
- hang: a rank sent no beat within its timeout (`DetectConfig`);
- fail-slow: a rank's compute time scored against the other ranks' median and its own best
  (slow against both);
  and the job's collective time against its own best (a slow NIC or cable slows every rank
  of a data-parallel ring alike, so no rank's compute stands out: the suspects are all the
  ranks, and the localizer's probe finds whose part it is).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from rackscale.recovery.config import DetectConfig
from rackscale.recovery.heartbeat import RankBeats


class Symptom(StrEnum):
    """What the supervisor saw (a runtime symptom, not yet a hardware fault kind)."""

    FAIL_STOP = "fail_stop"  # the rank's process ended (crash, kill, lost node)
    HANG = "hang"  # no heartbeat within the rank's timeout
    STRAGGLER = "straggler"  # consistently slower than the other ranks


@dataclass(slots=True, kw_only=True)
class Suspect:
    rank: int
    kind: Symptom
    evidence: dict[str, Any] = field(default_factory=dict)
    # Every rank that may hold the fault when the symptom is the job's, not one rank's (a
    # slow collective); `rank` is then a placeholder until localization names one.
    candidates: tuple[int, ...] = ()


def timeout_of(rb: RankBeats, cfg: DetectConfig) -> float:
    """The rank's hang timeout now: the start-up timeout until it has done `warmup_steps`
    steps, then `timeout_factor` x its longest gap between beats, never below the floor."""
    if rb.steps_seen < cfg.warmup_steps:
        return cfg.startup_timeout_s
    return max(cfg.hang_floor_s, cfg.timeout_factor * rb.max_gap_s)


def find_hang(ranks: Sequence[RankBeats], now: float, launched_at: float, cfg: DetectConfig,
              stopped: Callable[[int], bool] = lambda _r: False) -> Suspect | None:
    """A suspect when some rank is past its timeout. When one rank stops, the others soon
    wait in its collective and go quiet too, so the culprit is chosen among all silent ranks:
    a process the OS reports stopped first, then the least progress, then the oldest beat."""
    late = []
    for rb in ranks:
        if rb.done:
            continue
        since = now - (rb.last_t if rb.last_t is not None else launched_at)
        limit = timeout_of(rb, cfg)
        if since > limit:
            late.append((rb, since, limit))
    if not late:
        return None
    silent = [rb for rb in ranks if not rb.done]
    culprit = min(silent, key=lambda rb: (not stopped(rb.rank), rb.progress,
                                          rb.last_t if rb.last_t is not None else launched_at))
    rb, since, limit = next(((r, s, lim) for r, s, lim in late if r is culprit), late[0])
    return Suspect(rank=culprit.rank, kind=Symptom.HANG, evidence={
        "silent_s": round(since, 3), "timeout_s": round(limit, 3),
        "last_phase": culprit.last_phase, "last_step": culprit.last_step,
        "os_stopped": stopped(culprit.rank), "learned": culprit.steps_seen >= cfg.warmup_steps})


def find_fail_stop(codes: Sequence[int | None], ranks: Sequence[RankBeats]) -> Suspect | None:
    """A suspect when a rank's process failed (a non-zero exit or a signal; exit 0 is a rank
    that finished its part while the others finish theirs). A rank killed by a signal is the
    cause rather than a peer whose collective then failed; then the least progress."""
    ended = [r for r, c in enumerate(codes) if c is not None and c != 0]
    if not ended:
        return None
    culprit = min(ended, key=lambda r: (not (codes[r] or 0) < 0, ranks[r].progress))
    code = codes[culprit]
    return Suspect(rank=culprit, kind=Symptom.FAIL_STOP, evidence={
        "exit_code": code, "signal": -code if code is not None and code < 0 else None,
        "last_step": ranks[culprit].last_step, "ended_ranks": ended})


class StragglerDetector:
    """Fail-slow: fed each step that every rank has timed; flags a rank whose score against
    the median of the *other* ranks (the median of all would hide a slow rank in a small job)
    and whose score against its own best time since scoring began both stay under the
    threshold for `straggler_steps` consecutive scored steps. A rank slow from its first
    scored step is therefore never flagged: its times alone cannot tell a slow part from a
    rank that is always slower (another CPU model), and only the second is common.

    A step whose compute overlapped the rank's own checkpoint work (its beat says `ckpt`) is
    not scored for that rank: the rank keeps its earlier times and its count of slow steps,
    neither raised nor reset, while the other ranks are scored against its earlier speed. The
    rank that writes or pushes a checkpoint (rank 0 commits every save) is then not taken for
    a straggler after each save, and a rank that is slow on its other steps still is."""

    def __init__(self, world: int, cfg: DetectConfig) -> None:
        self.world, self.cfg = world, cfg
        self.scored_to = -1
        self.seen = 0  # steps fed, for the warm-up
        self.times: list[list[float]] = [[] for _ in range(world)]
        self.best: list[float | None] = [None] * world
        self.below = [0] * world
        self.last_scores: list[dict[str, float]] = [{} for _ in range(world)]

    def feed(self, ranks: Sequence[RankBeats]) -> Suspect | None:
        if self.world < 2 or self.cfg.straggler_off:
            return None
        common = set.intersection(*(set(rb.compute_s) for rb in ranks))
        for step in sorted(s for s in common if s > self.scored_to):
            self.scored_to = step
            busy = [step in rb.ckpt_steps for rb in ranks]
            got = self._score(step, [rb.compute_s[step] for rb in ranks], busy)
            if got is not None:
                return got
        return None

    def _score(self, step: int, raw: list[float], busy: list[bool]) -> Suspect | None:
        cfg = self.cfg
        self.seen += 1
        for r, t in enumerate(raw):
            if not busy[r]:  # a busy step's time is the checkpoint's, not the rank's speed
                self.times[r].append(t)
        smooth = [statistics.median(ts[-cfg.smooth_steps:]) if ts else None
                  for ts in self.times]
        if self.seen <= cfg.warmup_steps:  # first steps: allocation, caches
            return None
        scored = []
        for r, own_s in enumerate(smooth):
            if busy[r] or own_s is None:
                continue  # no time of its own this step
            # Floored alike: ranks all timed at zero (under the clock's resolution) are equal.
            own = max(own_s, 1e-9)
            # Its best is learned on every step past the warm-up, also one with no other
            # rank to compare with (the others all checkpointing): learned only once it can
            # be compared, a rank that slowed meanwhile took the slow time for its best and
            # was never flagged.
            self.best[r] = own if self.best[r] is None else min(self.best[r] or own, own)
            others_s = [x for q, x in enumerate(smooth) if q != r and x is not None]
            if not others_s:
                continue  # none to compare it with this step
            others = max(statistics.median(others_s), 1e-9)
            rel, ind = others / own, (self.best[r] or own) / own
            self.last_scores[r] = {"relative": round(rel, 4), "individual": round(ind, 4),
                                   "others_median_s": round(others, 6)}
            # Slow against the others AND against its own best: a rank that was always a
            # bit slower (another CPU model, a busier host) is as fast as it ever was, and
            # is no fault; a part that degrades is slower than both.
            slow = rel < cfg.straggler_threshold and ind < cfg.straggler_threshold
            self.below[r] = self.below[r] + 1 if slow else 0
            scored.append(r)
        # The worst of the ranks that are slow enough for long enough: the worst by score
        # alone may be a rank that is always slower and never counted.
        flagged = [r for r in scored if self.below[r] >= cfg.straggler_steps]
        if flagged:
            worst = min(flagged, key=lambda r: self.last_scores[r]["relative"])
            return Suspect(rank=worst, kind=Symptom.STRAGGLER, evidence={
                "step": step, "consecutive": self.below[worst],
                "threshold": cfg.straggler_threshold, **self.last_scores[worst],
                "compute_s": round(smooth[worst] or 0.0, 6)})
        return None


class CollectiveDetector:
    """Fail-slow of the job's collective: each step its collective time is the least, over
    the ranks, of the time from entering the step's collective (`sync`) to completing the
    step: the last rank to enter waits for no one, so its figure is the all-reduce itself.
    Scored against the job's own best (smoothed like the compute times); under the threshold,
    and slower than the best by at least `collective_floor_s`, for `straggler_steps`
    consecutive steps, every rank is a suspect. The best may come from earlier attempts of
    the job, so a fault present from an attempt's start is seen. A rank slow in compute does
    not raise it:
    it is the last to enter, and its own collective is as fast as ever."""

    def __init__(self, world: int, cfg: DetectConfig, best: float | None = None) -> None:
        self.world, self.cfg = world, cfg
        self.scored_to = -1
        self.times: list[float] = []
        self.best = best  # the job's best so far (from earlier attempts), else learned
        self.below = 0

    def feed(self, ranks: Sequence[RankBeats]) -> Suspect | None:
        if self.world < 2 or self.cfg.straggler_off:
            return None
        for step in self._complete(ranks):
            self.scored_to = step
            if any(step in rb.ckpt_steps for rb in ranks):
                continue  # a checkpoint's push shares the links and cores: not scored
            coll = min(rb.step_at[step] - rb.sync_at[step] for rb in ranks)
            got = self._score(step, max(coll, 1e-6))
            if got is not None:
                return got
        return None

    def _complete(self, ranks: Sequence[RankBeats]) -> Iterator[int]:
        """Steps every rank has completed, in order, from the first one not yet scored (an
        attempt's first step is where its checkpoint left off)."""
        if self.scored_to < 0:
            if not all(rb.step_at for rb in ranks):
                return
            step = max(min(rb.step_at) for rb in ranks)
        else:
            step = self.scored_to + 1
        while all(step in rb.step_at and step in rb.sync_at for rb in ranks):
            yield step
            step += 1

    def _score(self, step: int, coll: float) -> Suspect | None:
        cfg = self.cfg
        self.times.append(coll)
        if len(self.times) <= cfg.warmup_steps:
            return None
        own = statistics.median(self.times[-cfg.smooth_steps:])
        self.best = own if self.best is None else min(self.best, own)
        score = self.best / own
        slow = score < cfg.straggler_threshold and own - self.best >= cfg.collective_floor_s
        self.below = self.below + 1 if slow else 0
        if self.below < cfg.straggler_steps:
            return None
        return Suspect(rank=0, kind=Symptom.STRAGGLER, candidates=tuple(range(self.world)),
                       evidence={"scope": "collective", "step": step,
                                 "consecutive": self.below,
                                 "threshold": cfg.straggler_threshold,
                                 "individual": round(score, 4),
                                 "collective_s": round(own, 6),
                                 "best_collective_s": round(self.best, 6)})
