"""The same model as `engine`, written plainly in SimPy: one environment per trial, a process
for the job, one for fail-stop arrivals, one for fail-slow arrivals, one per repair.

It exists to check the vectorised engine (same ETTR within Monte Carlo error on the same
inputs) and to measure how much faster the engine is (bench/bench_simulate.py). It draws its
own random numbers, so the two agree in distribution, not trial by trial. Needs `simpy`.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, cast

import numpy as np
import simpy

from rackscale.simulate.config import Plan
from rackscale.simulate.engine import SCOPE_TRAY, Tallies

RUN, DETECT, WAIT, RESTART = "run", "detect", "wait", "restart"
_Process = Generator[simpy.Event, Any, None]  # what env.process() runs


class _Trial:
    def __init__(self, p: Plan, rng: np.random.Generator) -> None:
        self.p, self.rng = p, rng
        self.env = simpy.Environment()
        units = p.units_job + p.units_spare
        self.unit_back = [0.0] * units
        self.trays: list[list[float]] = [[] for _ in range(units)]  # tray return times
        self.usable_at = [0.0] * units
        self.job: list[int] = list(range(p.units_job))
        self.pool: list[int] = list(range(p.units_job, units))
        self.short = 0
        # The first launch (start_h) is restart time, as in the engine.
        self.phase = RESTART if p.start_h > 0 else RUN
        self.phase_end = p.start_h
        self.in_ckpt = False
        self.speed = 1.0
        self.seg_work = self.seg_wall = 0.0
        self.pend_work = self.pend_wall = 0.0
        self.ckpt_left = 0.0
        self.slow_gen = 0  # bumped by every restart: cancels pending straggler detection
        self.slow_active = False
        self.wake: simpy.Event | None = None
        self.t = {k: 0.0 for k in ("work", "useful", "ckpt", "recompute", "detect", "restart",
                                   "wait")}
        self.interruptions = [0] * len(p.causes)
        self.stragglers = self.escalations = self.swaps = 0
        self.job_proc = self.env.process(self._job())
        if p.fail_rate_h > 0:
            self.env.process(self._failures())
        if p.slow_rate_h > 0:
            self.env.process(self._stragglers())

    # ---------------------------------------------------------------- arrivals
    def _failures(self) -> _Process:
        p = self.p
        while True:
            yield self.env.timeout(self.rng.exponential(1 / p.fail_rate_h))
            cause = int(self.rng.choice(len(p.cause_p), p=p.cause_p))
            self.job_proc.interrupt(("fail", cause, self.rng.random()))

    def _stragglers(self) -> _Process:
        while True:
            yield self.env.timeout(self.rng.exponential(1 / self.p.slow_rate_h))
            u = self.rng.random()
            if self.phase == RUN:
                self.job_proc.interrupt(("slow", u))

    def _slow_detector(self, gen: int, u: float) -> _Process:
        yield self.env.timeout(self.p.slow_detect_h)
        if gen == self.slow_gen:
            self.job_proc.interrupt(("found", len(self.p.causes) - 1, u))

    def _repair(self, when: float) -> _Process:
        yield self.env.timeout(when - self.env.now)
        if self.wake is not None and not self.wake.triggered:
            self.wake.succeed()

    # ---------------------------------------------------------------- the job
    def _job(self) -> _Process:
        p, env = self.p, self.env
        while True:
            start = env.now
            try:
                if self.phase == WAIT:
                    self.wake = env.event()
                    yield self.wake
                elif self.phase == RUN:
                    yield env.timeout(self.ckpt_left if self.in_ckpt
                                      else (p.tau_h - self.seg_work) / self.speed)
                else:
                    yield env.timeout(self.phase_end - env.now)
                self._account(env.now - start)
                self._done()
            except simpy.Interrupt as it:
                self._account(env.now - start)
                # every interrupt of the job process above is raised with a tuple cause
                self._interrupted(cast(tuple[Any, ...], it.cause))

    def _account(self, dt: float) -> None:
        if self.phase == RUN:
            if self.in_ckpt:
                self.ckpt_left -= dt
                self.t["ckpt"] += dt
            else:
                self.seg_work += dt * self.speed
                self.seg_wall += dt
        else:
            self.t[self.phase] += dt

    def _done(self) -> None:
        p = self.p
        if self.phase == RUN and not self.in_ckpt:  # a segment's compute is done
            self.pend_work, self.pend_wall = p.tau_h, self.seg_wall
            self.seg_work = self.seg_wall = 0.0
            self.in_ckpt, self.ckpt_left = True, p.w_h
            if p.w_h > 0:
                return
        if self.phase == RUN:  # its checkpoint is written
            self.t["work"] += self.pend_work
            self.t["useful"] += self.pend_wall
            self.pend_work = self.pend_wall = 0.0
            self.in_ckpt, self.ckpt_left = False, 0.0
        elif self.phase == RESTART:
            self.phase = RUN
        else:  # detection finished or a repair came back
            self._fill()
            if self.short == 0:
                self.phase, self.phase_end = RESTART, self.env.now + p.u0_h
            else:
                self.phase = WAIT

    def _interrupted(self, cause: tuple[Any, ...]) -> None:
        if cause[0] == "slow":
            self.stragglers += 1
            self.speed = min(self.speed, 1 / self.p.slowdown)
            if not self.slow_active:
                self.slow_active = True
                self.env.process(self._slow_detector(self.slow_gen, cause[1]))
            return
        _, c, u = cause
        self.interruptions[c] += 1
        if self.phase == RUN:
            self.t["recompute"] += self.seg_wall + self.pend_wall
            self.seg_work = self.seg_wall = self.pend_work = self.pend_wall = 0.0
            self.in_ckpt, self.ckpt_left = False, 0.0
        self.speed, self.slow_active = 1.0, False
        self.slow_gen += 1
        self.phase, self.phase_end = DETECT, self.env.now + self.p.cause_detect_h[c]
        self._strike(c, u)

    # ---------------------------------------------------------------- hardware and spares
    def _strike(self, c: int, u: float) -> None:
        p, now = self.p, self.env.now
        slot = min(int(u * p.units_job), p.units_job - 1)
        unit = self.job[slot]
        if unit < 0 or p.cause_scope[c] == 0:
            return
        repair = float(p.cause_repair_h[c])
        if p.cause_scope[c] == SCOPE_TRAY and p.unit_trays > 1:
            pending = [b for b in self.trays[unit] if b > now]
            if p.escalate_at and len(pending) + 1 >= p.escalate_at:
                self.unit_back[unit] = max(self.unit_back[unit], now + p.rack_repair_h)
                self.trays[unit] = []
                self.escalations += 1
            else:
                self.trays[unit] = [*pending, now + repair]
        else:
            self.unit_back[unit] = max(self.unit_back[unit], now + repair)
        pending = sorted(b for b in self.trays[unit] if b > now)
        over = len(pending) - p.spare_trays
        at = max(self.unit_back[unit], pending[over - 1] if over > 0 else 0.0)
        self.usable_at[unit] = at
        if at > now:
            self.job[slot] = -1
            self.pool.append(unit)
            self.short += 1
            self.env.process(self._repair(at))
            self._fill()

    def _fill(self) -> None:
        now = self.env.now
        for unit in sorted(self.pool):
            if self.short == 0:
                return
            if self.usable_at[unit] <= now:
                self.pool.remove(unit)
                self.job[self.job.index(-1)] = unit
                self.short -= 1
                self.swaps += 1

    def finish(self) -> None:
        self.env.run(until=self.p.horizon_h)
        if self.phase == RUN:
            self._account(0.0)
            self.t["work"] += self.pend_work + self.seg_work
            self.t["useful"] += self.pend_wall + self.seg_wall


def simulate_simpy(p: Plan, progress: Callable[[float], None] | None = None) -> Tallies:
    k = p.config.trials
    rows = []
    for n in range(k):
        trial = _Trial(p, np.random.default_rng([p.config.seed, n]))
        trial.finish()
        rows.append(trial)
        if progress is not None:
            progress((n + 1) / k)

    def col(key: str) -> np.ndarray:
        return np.array([r.t[key] for r in rows])

    return Tallies(work=col("work"), useful_wall=col("useful"), checkpoint=col("ckpt"),
                   recompute=col("recompute"), detect=col("detect"), restart=col("restart"),
                   wait=col("wait"),
                   interruptions=np.array([r.interruptions for r in rows], dtype=np.int64),
                   stragglers=np.array([r.stragglers for r in rows]),
                   escalations=np.array([r.escalations for r in rows]),
                   swaps=np.array([r.swaps for r in rows]), steps=-1)


__all__ = ["simulate_simpy"]
