"""Storage what-if: the same failures with and without the local cache and cross-region
replication, at several checkpoint intervals (simulated, from measured storage figures).

Every setup and interval sees the same failure times and causes (common random numbers), so
their differences are paired and their confidence intervals narrow. The model is the engine's
renewal view of a job, evaluated in closed form over all trials and failures at once with
numpy (no event loop): after a failure the job detects it (per cause), restarts (u0) and
restores the checkpoint from the tier `simulate.storage` picks for the cause (plus a lost
region's outage when nothing is replicated); a failure during that recovery starts it again;
then it runs checkpoint cycles of `interval` compute and a blocking write. A failure loses the
work since the last checkpoint, and the one before it too when the newest is not yet durable
where the cause restores from. The job always finds spares (no waiting for repair) and has no
stragglers: `simulate run` models those.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rackscale.simulate.config import FleetShape, Plan, SimConfig, SimulateError, plan
from rackscale.simulate.results import mean_ci, young_daly
from rackscale.simulate.storage import StorageTimes

SIMULATED_WHATIF = ("simulated (renewal model in closed form over pre-drawn failures, common "
                    "random numbers; storage figures measured, then scaled)")
MAX_CELLS = 10_000_000
MAX_PRICE = 1e6  # per GPU-hour, any currency: as `report --gpu-hour-price`
SETUPS: dict[str, tuple[bool, bool]] = {  # name -> (local cache, cross-region replication)
    "cache+replication": (True, True),
    "cache only": (True, False),
    "replication only": (False, True),
    "neither": (False, False),
}


@dataclass(frozen=True, slots=True)
class Failures:
    """Pre-drawn failures of every trial: times (hours, inf past the horizon) and causes."""

    t: np.ndarray  # (trials, n) cumulative failure times
    cause: np.ndarray  # (trials, n)


def draw_failures(p: Plan) -> Failures:
    k, h, rate = p.config.trials, p.horizon_h, p.fail_rate_h
    rng = np.random.default_rng(np.random.SeedSequence(p.config.seed).spawn(1)[0])
    expected = rate * h
    n = max(16, int(expected + 8 * math.sqrt(expected) + 16))
    if k * n > MAX_CELLS:  # a dozen (trials x failures) float arrays live at once
        raise SimulateError(f"{k} trials of about {expected:.0f} failures each need "
                            f"{k * n:.3g} cells (limit {MAX_CELLS:.0e}): use fewer --trials "
                            "or --days")
    gaps = rng.exponential(1 / rate, (k, n)) if rate > 0 else np.full((k, n), np.inf)
    t = np.cumsum(gaps, axis=1)
    while np.isfinite(t[:, -1]).any() and (t[:, -1] < h).any():  # bounded: each adds n draws
        more = np.cumsum(rng.exponential(1 / rate, (k, n)), axis=1) + t[:, -1:]
        t = np.concatenate([t, more], axis=1)
    cause = rng.choice(len(p.cause_p), size=t.shape, p=p.cause_p)
    return Failures(t=np.where(t < h, t, np.inf), cause=cause)


def evaluate(p: Plan, f: Failures) -> dict[str, np.ndarray]:
    """Per-trial kept work and losses (hours) of plan `p` on failures `f`."""
    k, h, tau, w = p.config.trials, p.horizon_h, p.tau_h, p.w_h
    valid = np.isfinite(f.t)
    pad = np.zeros((k, 1))
    pre = np.where(valid, p.cause_detect_h[f.cause], 0.0)
    rest = np.where(valid, p.cause_restore_h[f.cause], 0.0)
    # A lost region is back at a wall-clock time that later failures neither shorten nor
    # restart: the running maximum of (failure time + outage) over the failures so far.
    back = np.maximum.accumulate(np.where(valid, f.t + p.cause_extra_h[f.cause], 0.0), axis=1)
    t = np.where(valid, f.t, h)
    ready = np.maximum(t + pre, back)  # the job can restart (u0, then the restore)
    run_from = np.concatenate([pad, ready + p.u0_h + rest], axis=1)
    end = np.concatenate([t, np.full((k, 1), h)], axis=1)
    by_fail = np.concatenate([valid, np.zeros((k, 1), dtype=bool)], axis=1)
    nxt = np.concatenate([f.cause, np.zeros((k, 1), dtype=f.cause.dtype)], axis=1)
    run = np.maximum(end - run_from, 0.0)  # 0: the recovery itself was interrupted
    cycle = tau + w
    n = np.floor(run / cycle)
    rem = run - n * cycle
    exposed = p.cause_exposed_h[nxt]
    rolled = by_fail & (n >= 1) & (rem < exposed)
    kept = np.where(by_fail, (n - rolled) * tau, n * tau + np.minimum(rem, tau))
    # The restore comes last in a recovery; an interrupted recovery pays part of it.
    restore = np.clip(end - (run_from - np.concatenate([pad, rest], axis=1)), 0.0,
                      np.concatenate([pad, rest], axis=1))
    return {"work": kept.sum(axis=1), "restore": restore.sum(axis=1),
            "checkpoint": (n * w + np.clip(rem - tau, 0.0, w)).sum(axis=1),
            "interruptions": valid.sum(axis=1).astype(float)}


def _setup_plans(base: SimConfig, fleet: FleetShape, storage: StorageTimes,
                 intervals: list[float]) -> dict[str, list[Plan]]:
    out = {}
    for name, (cache, repl) in SETUPS.items():
        st = storage.model_copy(update={"local_cache": cache, "replication": repl})
        out[name] = [plan(base.model_copy(update={"storage": st, "ckpt_interval_min": iv}),
                          fleet) for iv in intervals]
    return out


def storage_whatif(base: SimConfig, fleet: FleetShape, storage: StorageTimes,
                   intervals: list[float], *, gpu_hour_price: float = 2.0,
                   progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """ETTR, goodput, lost GPU-hours and their cost per setup and interval; each setup's best
    interval beside Young/Daly; what the cache and the replication buy at the config's
    checkpoint interval."""
    if not intervals or min(intervals) <= 0:
        raise SimulateError("--intervals-min: give checkpoint intervals in minutes, all > 0")
    if not 0 <= gpu_hour_price <= MAX_PRICE:  # NaN fails both comparisons
        raise SimulateError(f"--gpu-hour-price: give a price per GPU-hour in 0..{MAX_PRICE:,.0f}"
                            f" (got {gpu_hour_price:g})")
    ref = base.ckpt_interval_min
    intervals = sorted(set(intervals) | {ref})
    t0 = time.perf_counter()
    plans = _setup_plans(base, fleet, storage, intervals)
    first = plans["cache+replication"][0]
    fails = draw_failures(first)  # one draw for every setup: common random numbers
    gpus, h, month = first.job_gpus_alloc, first.horizon_h, 30 * 24 / first.horizon_h
    setups: dict[str, Any] = {}
    lost_at_ref: dict[str, np.ndarray] = {}
    done, total = 0, len(SETUPS) * len(intervals)
    for name, ps in plans.items():
        rows: list[dict[str, Any]] = []
        for iv, p in zip(intervals, ps, strict=True):
            ev = evaluate(p, fails)
            ettr = ev["work"] / h
            lost_gpu_h = (h - ev["work"]) * gpus
            if iv == ref:
                lost_at_ref[name] = lost_gpu_h
            rows.append({"interval_min": iv, "blocking_s": p.w_h * 3600,
                         "ettr": mean_ci(ettr), "goodput": mean_ci(ettr * base.mfu),
                         "lost_gpu_hours": mean_ci(lost_gpu_h),
                         "lost_cost": mean_ci(lost_gpu_h * gpu_hour_price),
                         "restore_hours": float(ev["restore"].mean()),
                         "interruptions": float(ev["interruptions"].mean())})
            done += 1
            if progress is not None:
                progress(done, total)
        means = [r["ettr"]["mean"] for r in rows]
        b = int(np.argmax(means))
        best = rows[b]
        cost_h = best["blocking_s"] / 3600
        setups[name] = {"local_cache": SETUPS[name][0], "replication": SETUPS[name][1],
                        "points": rows, "optimal_interval_min": best["interval_min"],
                        "optimal_ettr": best["ettr"], "fitted_optimum_min": _peak(
                            intervals[max(b - 1, 0):b + 2], means[max(b - 1, 0):b + 2]),
                        **young_daly(first.job_mtbf_h, cost_h)}
    buys = _buys(lost_at_ref, gpu_hour_price, month)
    return {
        "simulated": True, "note": SIMULATED_WHATIF,
        "fleet": fleet.name, "job_gpus": base.job_gpus, "job_gpus_allocated": gpus,
        "days": base.days, "trials": base.trials, "seed": base.seed,
        "failure_model": base.failure_model, "job_mtbf_h": first.job_mtbf_h,
        "restart_min": base.restart_min, "gpu_hour_price": gpu_hour_price,
        "reference_interval_min": ref, "intervals_min": intervals,
        "storage": storage_figures(storage),
        # Worst work lost to a region loss at the reference interval (the restart is extra).
        "rpo_region_loss_s": {
            "with replication": storage.model_copy(update={"replication": True})
            .rpo_region_loss_s(ref * 60),
            "without replication": storage.model_copy(update={"replication": False})
            .rpo_region_loss_s(ref * 60)},
        "setups": setups, "buys_per_month": buys,
        "wall_s": time.perf_counter() - t0,
    }


def _peak(xs: list[float], ys: list[float]) -> float | None:
    """The top of the parabola (in log interval) through the best point and its neighbours;
    None when the best is at an end of the range (widen the intervals)."""
    if len(xs) < 3:
        return None
    lx = np.log(np.asarray(xs, dtype=float))
    a, b, _ = np.polyfit(lx, np.asarray(ys), 2)
    if a >= 0:
        return None
    return float(np.exp(np.clip(-b / (2 * a), lx.min(), lx.max())))


def _buys(lost: dict[str, np.ndarray], price: float, month: float) -> dict[str, Any]:
    """Paired differences of lost GPU-hours (same failures), scaled to a 30-day month."""
    pairs = {"local cache (with replication)": ("replication only", "cache+replication"),
             "local cache (without replication)": ("neither", "cache only"),
             "replication (with local cache)": ("cache only", "cache+replication"),
             "replication (without local cache)": ("neither", "replication only")}
    out = {}
    for what, (without, with_) in pairs.items():
        saved = (lost[without] - lost[with_]) * month
        out[what] = {"gpu_hours": mean_ci(saved), "money": mean_ci(saved * price)}
    return out


def storage_figures(st: StorageTimes) -> dict[str, Any]:
    """The storage inputs, labelled: measured on a profile, scaled to the job's share."""
    return {"basis": f"measured ({st.source}), scaled to {st.shard_bytes} bytes per node",
            **st.model_dump(exclude={"local_cache", "replication", "source"}),
            "assumptions": {"region_loss_per_year": st.region_loss_per_year,
                            "region_outage_h": st.region_outage_h}}
