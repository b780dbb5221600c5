"""The discrete-event engine, vectorised across Monte Carlo trials.

Every trial is its own event-driven simulation with its own clock; numpy runs them in
lockstep, one event per trial per step (each trial takes its own next event). Nothing is
binned or approximated in time: checkpoints between two events are accounted in closed form
(they are deterministic given the speed), so they need no events of their own.

The model (the same one `simpy_ref` writes plainly):
- The job holds `units_job` units (NVLink domains or trays) and fails at a constant Poisson
  rate (its allocated GPUs x the model's rate per GPU-hour), whatever its phase: a failure
  while it recovers restarts the recovery. Idle spares do not fail.
- The job's first launch takes `start_h` (restart time) before it computes.
- Job phases: RUN (compute, then a blocking checkpoint every `tau` of fault-free work) ->
  on failure: detection (per-cause latency) -> WAIT while it lacks units -> restart (u0) -> RUN.
  Work since the last completed checkpoint is lost (recompute).
- A failure's cause picks its scope: none (restart only), tray (the tray goes to repair), or
  domain (the whole domain does). A unit with more trays out than its hot-spare trays, or in
  repair as a whole, leaves the job; a usable spare unit replaces it, else the job waits.
  With `escalate_at` trays out at once, the whole rack goes to repair (rack escalation).
- Fail-slow (straggler) arrivals while running slow the whole job to 1/slowdown until
  straggler detection finds them, which interrupts the job like a tray fault. Any restart
  clears active stragglers.
- With measured storage figures (`simulate.storage`): each failure adds the restore time of
  the tier its cause restores from to u0, a lost region keeps the job down until it is back
  (a wall-clock time), and a failure before the newest checkpoint is durable in that tier
  loses that checkpoint too (one more interval of work).
- Failure times, causes and struck units come from per-trial streams drawn up front, so two
  runs with the same seed see the same failures whatever the policy (common random numbers:
  a sweep's points differ only by the policy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rackscale.simulate.config import Plan

RUN, DETECT, WAIT = 0, 1, 2
EV_FAIL, EV_SLOW, EV_SLOW_FOUND, EV_PHASE, EV_WAIT, EV_END = range(6)
EPS = 1e-12
SCOPE_TRAY, SCOPE_DOMAIN = 1, 2


class _Stream:
    """Per-trial pre-drawn sequence of (gap, cause, unit) draws, extended on demand."""

    def __init__(self, rng: np.random.Generator, trials: int, rate: float, p: np.ndarray | None,
                 expected: float) -> None:
        self.rng, self.rate, self.p, self.k = rng, rate, p, trials
        self.chunk = max(16, int(expected + 6 * np.sqrt(expected) + 16))
        self.gap = np.empty((trials, 0))
        self.cause = np.empty((trials, 0), dtype=np.int64)
        self.unit = np.empty((trials, 0))
        self.extend()

    def extend(self) -> None:
        n = self.chunk
        gap = (self.rng.exponential(1 / self.rate, (self.k, n)) if self.rate > 0
               else np.full((self.k, n), np.inf))
        cause = (self.rng.choice(len(self.p), size=(self.k, n), p=self.p) if self.p is not None
                 else np.zeros((self.k, n), dtype=np.int64))
        self.gap = np.concatenate([self.gap, gap], axis=1)
        self.cause = np.concatenate([self.cause, cause], axis=1)
        self.unit = np.concatenate([self.unit, self.rng.random((self.k, n))], axis=1)

    def ensure(self, i: np.ndarray) -> None:
        while i.size and i.max() >= self.gap.shape[1]:
            self.extend()


@dataclass(slots=True)
class Tallies:
    """Per-trial totals, hours unless named otherwise; `interruptions` is (trials, causes)."""

    work: np.ndarray  # fault-free-equivalent work kept
    useful_wall: np.ndarray  # wall time of the compute that was kept
    checkpoint: np.ndarray
    recompute: np.ndarray
    detect: np.ndarray
    restart: np.ndarray
    wait: np.ndarray
    interruptions: np.ndarray
    stragglers: np.ndarray  # fail-slow arrivals while running
    escalations: np.ndarray
    swaps: np.ndarray  # units replaced from the spare pool
    steps: int


def simulate(p: Plan, progress: Callable[[float], None] | None = None) -> Tallies:
    return _Engine(p).run(progress)


class _Engine:
    def __init__(self, p: Plan) -> None:
        self.p = p
        k, h = p.config.trials, p.horizon_h
        fail_rng, slow_rng = (np.random.default_rng(s)
                              for s in np.random.SeedSequence(p.config.seed).spawn(2))
        self.fails = _Stream(fail_rng, k, p.fail_rate_h, p.cause_p, p.fail_rate_h * h)
        self.slows = _Stream(slow_rng, k, p.slow_rate_h, None, p.slow_rate_h * h)
        self.k = k
        self.t = np.zeros(k)
        self.phase = np.full(k, RUN, dtype=np.int8)
        self.phase_end = np.full(k, np.inf)  # end of DETECT
        # Detection and restart need no event of their own when no unit is missing: the job
        # is in RUN from `run_from` on; before it, time up to `restart_from` is detection and
        # the rest restart. One event per failure instead of three.
        self.restart_from = np.zeros(k)
        self.run_from = np.full(k, p.start_h)  # the first launch: restart time, then RUN
        self.wait_at = np.full(k, np.inf)
        self.next_fail = self.fails.gap[:, 0].copy()
        self.fail_i = np.ones(k, dtype=np.int64)
        self.next_slow = self.slows.gap[:, 0].copy()
        self.slow_i = np.ones(k, dtype=np.int64)
        self.slow_found = np.full(k, np.inf)
        self.slow_unit = np.zeros(k)
        self.speed = np.ones(k)
        self.seg_work = np.zeros(k)
        self.seg_wall = np.zeros(k)
        self.ckpt_left = np.zeros(k)
        self.pend_work = np.zeros(k)
        self.pend_wall = np.zeros(k)
        # The last checkpoint committed since the job last started (work, wall); a failure
        # while it is not yet durable where the cause restores from rolls it back too.
        self.last_work = np.zeros(k)
        self.last_wall = np.zeros(k)
        self.restore_h = np.zeros(k)  # checkpoint restore of the latest interruption
        # A lost region is back at a wall-clock time: failures during its outage do not
        # shorten (or restart) it. 0: no outage.
        self.region_back = np.zeros(k)
        units = p.units_job + p.units_spare
        self.job_unit = np.tile(np.arange(p.units_job), (k, 1))
        self.in_job = np.zeros((k, units), dtype=bool)
        self.in_job[:, :p.units_job] = True
        self.short = np.zeros(k, dtype=np.int64)
        self.tray_back = np.zeros((k, units, p.slots))  # return times of trays in repair
        self.unit_back = np.zeros((k, units))  # return time of a unit in repair as a whole
        # When each unit is usable again. Spares do not fail, so this only changes when a
        # fault strikes the unit: it is kept up to date there instead of being recomputed.
        self.usable_at = np.zeros((k, units))
        z = np.zeros
        self.tally = Tallies(work=z(k), useful_wall=z(k), checkpoint=z(k), recompute=z(k),
                             detect=z(k), restart=z(k), wait=z(k),
                             interruptions=z((k, len(p.causes)), dtype=np.int64),
                             stragglers=z(k, dtype=np.int64), escalations=z(k, dtype=np.int64),
                             swaps=z(k, dtype=np.int64), steps=0)

    # ------------------------------------------------------------------ main loop
    def run(self, progress: Callable[[float], None] | None) -> Tallies:
        h = self.p.horizon_h
        active = np.ones(self.k, dtype=bool)
        steps = 0
        while True:
            idx = np.flatnonzero(active)
            if idx.size == 0:
                break
            slow_next = self.next_slow[idx]
            cand = np.stack([self.next_fail[idx], slow_next, self.slow_found[idx],
                             self.phase_end[idx], self.wait_at[idx], np.full(idx.size, h)])
            ev = np.argmin(cand, axis=0)
            t_new = cand[ev, np.arange(idx.size)]
            self._advance(idx, t_new)
            # Fail-stop and straggler-found events are both interruptions: one call for both.
            fail, found = idx[ev == EV_FAIL], idx[ev == EV_SLOW_FOUND]
            if fail.size or found.size:
                cause, unit = self._draw_fail(fail)
                if found.size:
                    fail = np.concatenate([fail, found])
                    cause = np.concatenate([cause, np.full(found.size, len(self.p.causes) - 1)])
                    unit = np.concatenate([unit, self.slow_unit[found]])
                self._interrupt(fail, cause, unit)
            sel = idx[ev == EV_SLOW]
            if sel.size:
                self._on_slow(sel)
            sel = idx[(ev == EV_PHASE) | (ev == EV_WAIT)]
            if sel.size:  # detection over, or a unit came back: fill, then restart or wait
                self._fill(sel)
                self._after_detect_or_wait(sel)
            done = idx[ev == EV_END]
            if done.size:
                self._finish(done)
                active[done] = False
            steps += 1
            if progress is not None and steps % 64 == 0:
                progress(float(self.t[active].min() / h) if active.any() else 1.0)
        if progress is not None:
            progress(1.0)
        self.tally.steps = steps
        return self.tally

    # ------------------------------------------------------------------ time accounting
    def _advance(self, idx: np.ndarray, t_new: np.ndarray) -> None:
        dt = t_new - self.t[idx]
        self.t[idx] = t_new
        ph = self.phase[idx]
        tl = self.tally
        for code, acc in ((DETECT, tl.detect), (WAIT, tl.wait)):
            m = ph == code
            if m.any():
                acc[idx[m]] += dt[m]
        m = ph == RUN
        if m.any():
            i, d = idx[m], dt[m]
            t0 = t_new[m] - d
            rec = np.clip(self.run_from[i] - t0, 0.0, d)
            det = np.clip(self.restart_from[i] - t0, 0.0, rec)
            tl.detect[i] += det
            tl.restart[i] += rec - det
            self._advance_run(i, d - rec)

    def _advance_run(self, i: np.ndarray, dt: np.ndarray) -> None:
        """Compute/checkpoint cycles over dt at each trial's speed, in closed form."""
        tau, w, tl = self.p.tau_h, self.p.w_h, self.tally
        sp = self.speed[i]
        # 1. a checkpoint write in progress
        cl = self.ckpt_left[i]
        a = np.minimum(dt, cl)
        tl.checkpoint[i] += a
        dt = dt - a
        cl = cl - a
        done = (self.ckpt_left[i] > 0) & (cl <= EPS)
        self.ckpt_left[i] = np.where(cl <= EPS, 0.0, cl)
        self._commit(i[done])
        # 2. the rest of the current compute segment
        rem = (tau - self.seg_work[i]) / sp
        go = dt > EPS
        fin = go & (dt >= rem)
        part = go & ~fin
        ip = i[part]
        self.seg_work[ip] += dt[part] * sp[part]
        self.seg_wall[ip] += dt[part]
        if not fin.any():
            return
        j, d2, s = i[fin], dt[fin] - rem[fin], sp[fin]
        self.pend_work[j] = tau
        self.pend_wall[j] = self.seg_wall[j] + rem[fin]
        self.seg_work[j] = 0.0
        self.seg_wall[j] = 0.0
        # 3. the checkpoint that segment ends with, then whole cycles, then a partial one
        writing = d2 < w
        jw = j[writing]
        self.ckpt_left[jw] = w - d2[writing]
        tl.checkpoint[jw] += d2[writing]
        more = ~writing
        if not more.any():
            return
        j, d3, s = j[more], d2[more] - w, s[more]
        tl.checkpoint[j] += w
        self._commit(j)
        seg = tau / s
        n = np.floor(d3 / (seg + w))
        tl.work[j] += n * tau
        tl.useful_wall[j] += n * seg
        tl.checkpoint[j] += n * w
        whole = n >= 1
        self.last_work[j[whole]] = tau
        self.last_wall[j[whole]] = seg[whole]
        r = d3 - n * (seg + w)
        comp = (r < seg) | (w <= 0)
        jc = j[comp]
        self.seg_work[jc] = np.minimum(r[comp] * s[comp], tau)
        self.seg_wall[jc] = r[comp]
        jk = j[~comp]
        if jk.size:
            self.pend_work[jk] = tau
            self.pend_wall[jk] = seg[~comp]
            into = r[~comp] - seg[~comp]
            self.ckpt_left[jk] = w - into
            tl.checkpoint[jk] += into

    def _commit(self, i: np.ndarray) -> None:
        self.last_work[i] = self.pend_work[i]
        self.last_wall[i] = self.pend_wall[i]
        self.tally.work[i] += self.pend_work[i]
        self.tally.useful_wall[i] += self.pend_wall[i]
        self.pend_work[i] = 0.0
        self.pend_wall[i] = 0.0

    def _finish(self, i: np.ndarray) -> None:
        # The job goes on past the horizon: work not yet checkpointed is not lost.
        running = i[self.phase[i] == RUN]
        self._commit(running)
        self.tally.work[running] += self.seg_work[running]
        self.tally.useful_wall[running] += self.seg_wall[running]

    # ------------------------------------------------------------------ events
    def _draw_fail(self, i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        f = self.fails
        n = self.fail_i[i]
        f.ensure(n)
        self.next_fail[i] = self.t[i] + f.gap[i, n]
        self.fail_i[i] = n + 1
        return f.cause[i, n - 1], f.unit[i, n - 1]

    def _on_slow(self, i: np.ndarray) -> None:
        s = self.slows
        n = self.slow_i[i]
        s.ensure(n)
        self.next_slow[i] = self.t[i] + s.gap[i, n]
        self.slow_i[i] = n + 1
        # a fail-slow part of a job that is down (or recovering) harms nothing
        r = i[(self.phase[i] == RUN) & (self.run_from[i] <= self.t[i])]
        if r.size == 0:
            return
        self.tally.stragglers[r] += 1
        self.speed[r] = np.minimum(self.speed[r], 1 / self.p.slowdown)
        first = np.isinf(self.slow_found[r])
        rf = r[first]
        self.slow_found[rf] = self.t[rf] + self.p.slow_detect_h
        self.slow_unit[rf] = s.unit[rf, self.slow_i[rf] - 2]

    def _after_detect_or_wait(self, i: np.ndarray) -> None:
        ready = self.short[i] == 0
        r = i[ready]
        self.phase[r] = RUN
        self.phase_end[r] = np.inf
        self.restart_from[r] = self.t[r]
        self.run_from[r] = (np.maximum(self.t[r], self.region_back[r]) + self.p.u0_h
                            + self.restore_h[r])
        self.wait_at[r] = np.inf
        w = i[~ready]
        if w.size:
            self.phase[w] = WAIT
            self.phase_end[w] = np.inf
            self.wait_at[w] = self._next_usable(w)

    def _interrupt(self, i: np.ndarray, cause: np.ndarray, unit_u: np.ndarray) -> None:
        p, tl = self.p, self.tally
        tl.interruptions[i, cause] += 1  # one event per trial per step: (i, cause) unique
        is_run = (self.phase[i] == RUN) & (self.run_from[i] <= self.t[i])
        running = i[is_run]
        tl.recompute[running] += self.seg_wall[running] + self.pend_wall[running]
        self._roll_back(running, cause[is_run])
        for a in (self.seg_work, self.seg_wall, self.pend_work, self.pend_wall, self.ckpt_left,
                  self.last_work, self.last_wall):
            a[running] = 0.0
        self.restore_h[i] = p.cause_restore_h[cause]
        self.region_back[i] = np.maximum(self.region_back[i], self.t[i] + p.cause_extra_h[cause])
        self.speed[i] = 1.0
        self.slow_found[i] = np.inf
        detected = self.t[i] + p.cause_detect_h[cause]
        self.phase[i] = RUN  # recovering until run_from; DETECT if it lacks a unit, below
        self.restart_from[i] = detected
        self.run_from[i] = np.maximum(detected, self.region_back[i]) + p.u0_h + self.restore_h[i]
        self.phase_end[i] = np.inf
        self.wait_at[i] = np.inf
        short = self.short[i] > 0
        self.phase[i[short]] = DETECT
        self.phase_end[i[short]] = detected[short]
        # hardware: which of the job's units the fault struck
        slot = np.minimum((unit_u * p.units_job).astype(np.int64), p.units_job - 1)
        unit = self.job_unit[i, slot]
        scope = p.cause_scope[cause]
        hit = (unit >= 0) & (scope > 0)
        if not hit.any():
            return
        i, slot, unit, cause, scope = i[hit], slot[hit], unit[hit], cause[hit], scope[hit]
        t = self.t[i]
        rep = p.cause_repair_h[cause]
        tray = scope == SCOPE_TRAY
        if p.unit_trays == 1:
            tray[:] = False  # a one-tray unit: any fault takes out the unit itself
        dom = ~tray
        self.unit_back[i[dom], unit[dom]] = np.maximum(self.unit_back[i[dom], unit[dom]],
                                                       t[dom] + rep[dom])
        if tray.any():
            it, ut, tt = i[tray], unit[tray], t[tray]
            backs = self.tray_back[it, ut]
            out = (backs > tt[:, None]).sum(axis=1) + 1
            esc = (out >= p.escalate_at) if p.escalate_at > 0 else np.zeros(it.size, bool)
            ie, ue = it[esc], ut[esc]
            self.unit_back[ie, ue] = np.maximum(self.unit_back[ie, ue], tt[esc] + p.rack_repair_h)
            self.tray_back[ie, ue] = 0.0  # the rack repair fixes its trays too
            tl.escalations[ie] += 1
            keep = ~esc
            free = np.argmin(backs[keep] > tt[keep, None], axis=1)
            self.tray_back[it[keep], ut[keep], free] = tt[keep] + rep[tray][keep]
        need = p.slots - 1 - p.spare_trays  # ascending order: the tray that tips the unit
        at = self.unit_back[i, unit]
        if need >= 0:
            at = np.maximum(at, np.sort(self.tray_back[i, unit], axis=-1)[:, need])
        self.usable_at[i, unit] = at
        lost = at > t
        il, sl, ul = i[lost], slot[lost], unit[lost]
        self.job_unit[il, sl] = -1
        self.in_job[il, ul] = False
        self.short[il] += 1
        if il.size:
            self._fill(il)
            still = lost.copy()
            still[lost] = self.short[il] > 0
            # short of a unit: detect, then fill or wait (no direct restart)
            self.phase[i[still]] = DETECT
            self.phase_end[i[still]] = t[still] + p.cause_detect_h[cause[still]]

    def _roll_back(self, i: np.ndarray, cause: np.ndarray) -> None:
        """The newest checkpoint is lost too when the failure comes before it is durable in
        the tier its cause restores from (simulate.storage)."""
        writing = self.ckpt_left[i] > 0
        since = self.seg_wall[i] + self.pend_wall[i] + np.where(
            writing, self.p.w_h - self.ckpt_left[i], 0.0)
        lost = (self.last_wall[i] > 0) & (since < self.p.cause_exposed_h[cause])
        j = i[lost]
        if j.size:
            tl = self.tally
            tl.recompute[j] += self.last_wall[j]
            tl.work[j] -= self.last_work[j]
            tl.useful_wall[j] -= self.last_wall[j]

    # ------------------------------------------------------------------ spares
    def _fill(self, i: np.ndarray) -> None:
        i = i[self.short[i] > 0]
        if i.size == 0:
            return
        avail = (self.usable_at[i] <= self.t[i][:, None]) & ~self.in_job[i]
        while True:
            can = (self.short[i] > 0) & avail.any(axis=1)
            if not can.any():
                return
            j = i[can]
            unit = np.argmax(avail[can], axis=1)
            slot = np.argmax(self.job_unit[j] < 0, axis=1)
            self.job_unit[j, slot] = unit
            self.in_job[j, unit] = True
            self.short[j] -= 1
            self.tally.swaps[j] += 1
            avail[np.flatnonzero(can), unit] = False

    def _next_usable(self, i: np.ndarray) -> np.ndarray:
        """Earliest time a unit outside the job becomes usable (inf if none will)."""
        at = self.usable_at[i]
        at = np.where(self.in_job[i] | (at <= self.t[i][:, None]), np.inf, at)
        earliest: np.ndarray = at.min(axis=1)
        return earliest
