"""From per-trial tallies to the figures users read: ETTR, goodput, MTTF, losses, with CIs.

Also the published analytic checks the simulator is compared with: Meta's E[ETTR]
approximation, the exact renewal ETTR of the same memoryless model, and the Young/Daly
checkpoint interval. A run's result is a typed `SimResult` (rackscale.simresult) and a sweep's
a `SweepResult` of one `SweepPoint` (a result and its value) per value; both say
`simulated: true`.
"""

from __future__ import annotations

import functools
import math
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rackscale.simresult import MeanCI, SimResult, YoungDaly
from rackscale.simulate.config import (
    FleetShape,
    Plan,
    SimConfig,
    SimulateError,
    make_config,
    plan,
)
from rackscale.simulate.engine import Tallies, simulate

SIMULATED = "simulated (discrete-event model with published failure rates; not measured)"
Z95 = 1.959964


def mean_ci(x: np.ndarray) -> dict[str, float]:
    """Mean and the half-width of its 95% confidence interval (normal approximation)."""
    x = np.asarray(x, dtype=float)
    half = Z95 * x.std(ddof=1) / math.sqrt(x.size) if x.size > 1 else math.nan
    return {"mean": float(x.mean()), "ci95": float(half)}


def meta_ettr(nodes: float, rf_per_node_day: float, u0_h: float, interval_h: float,
              w_h: float = 0.0) -> float:
    """Meta's approximation: (1 - N r_f (u0 + dt/2)) / (1 + w/dt) (Kokolis et al. 2025)."""
    rate_h = nodes * rf_per_node_day / 24
    return (1 - rate_h * (u0_h + interval_h / 2)) / (1 + w_h / interval_h)


def renewal_ettr(rate_h: float, interval_h: float, u0_h: float, w_h: float = 0.0) -> float:
    """Exact long-run ETTR of the memoryless model with instant detection and no waiting:
    a segment of `interval` compute plus `w` write completes with probability e^-rate(i+w);
    each failure costs a restart u0 that failures can also interrupt."""
    x = rate_h * (interval_h + w_h)
    return rate_h * interval_h / (math.expm1(x) * math.exp(rate_h * u0_h))


def young_daly(mtbf_h: float, cost_h: float) -> dict[str, float]:
    """Young T = sqrt(2 M C); Daly T = sqrt(2 C M) - C (docs/figures.md). Minutes."""
    if cost_h <= 0 or not math.isfinite(mtbf_h):
        return {"young_min": math.nan, "daly_min": math.nan}
    young = math.sqrt(2 * mtbf_h * cost_h)
    return {"young_min": young * 60, "daly_min": (young - cost_h) * 60}


def summarize(p: Plan, tl: Tallies, wall_s: float) -> SimResult:
    """The figures of one run from its per-trial tallies (means over the trials, 95% CIs)."""
    c, h = p.config, p.horizon_h
    hold = h - tl.wait
    ettr = tl.work / h
    with np.errstate(divide="ignore", invalid="ignore"):
        runtime = np.where(hold > 0, tl.useful_wall / hold, 0.0)
        program = np.where(tl.useful_wall > 0, tl.work / tl.useful_wall, 1.0) * c.mfu
    gp = {"scheduling": mean_ci(hold / h), "runtime": mean_ci(runtime),
          "program": mean_ci(program), "total": mean_ci(ettr * c.mfu)}
    counts = tl.interruptions.sum(axis=1)
    by_cause: dict[str, float] = {}
    by_kind: dict[str, float] = {}
    for j, cause in enumerate(p.causes):
        m = float(tl.interruptions[:, j].mean())
        if m > 0 or cause.count > 0:
            by_cause[cause.name] = m
            by_kind[cause.kind] = by_kind.get(cause.kind, 0.0) + m
    lost = {"recompute": tl.recompute, "restart": tl.restart, "detection": tl.detect,
            "waiting for repair or spare": tl.wait, "checkpoint writes": tl.checkpoint,
            "straggler slowdown": tl.useful_wall - tl.work}
    mtbf = 1 / (p.fail_rate_h + p.slow_rate_h) if p.fail_rate_h + p.slow_rate_h > 0 else math.inf
    return SimResult.model_validate({
        "simulated": True,
        "note": SIMULATED,
        "run_id": f"sim-{uuid.uuid4().hex[:12]}",
        "fleet": p.fleet.name,
        "fleet_gpus": p.fleet.fleet_gpus or p.fleet.gpus,
        # The job's pool: one rack template or GPU SKU of a mixed fleet (the whole fleet else).
        "pool": p.fleet.pool or p.fleet.template,
        "pool_template": p.fleet.template,
        "pool_gpus": p.fleet.gpus,
        "job_gpus": c.job_gpus,
        "job_gpus_allocated": p.job_gpus_alloc,
        "align": c.align,
        "units_job": p.units_job,
        "units_spare": p.units_spare,
        "days": c.days,
        "trials": c.trials,
        "seed": c.seed,
        "failure_model": c.failure_model,
        "ckpt_interval_min": c.ckpt_interval_min,
        "ckpt_cost_s": c.ckpt_cost_s,
        "restart_min": c.restart_min,
        "spare_trays": p.spare_trays,
        "escalate_at": p.escalate_at,
        "ettr": mean_ci(ettr),
        "goodput": {k: v["mean"] for k, v in gp.items()},
        "goodput_ci95": {k: v["ci95"] for k, v in gp.items()},
        "job_mttf_h": h / float(counts.mean()) if counts.mean() > 0 else math.inf,
        "job_mtbf_model_h": p.job_mtbf_h,
        "interruptions": mean_ci(counts),
        "interruptions_by_cause": by_cause,
        "interruptions_by_kind": by_kind,
        "lost_hours_by_cause": {k: float(v.mean()) for k, v in lost.items()},
        "stragglers": float(tl.stragglers.mean()),
        "rack_escalations": float(tl.escalations.mean()),
        "unit_swaps": float(tl.swaps.mean()),
        **young_daly(mtbf, p.w_h),
        "engine_steps": tl.steps,
        "wall_s": wall_s,
    })


def run(config: SimConfig, fleet: FleetShape,
        progress: Callable[[float], None] | None = None) -> SimResult:
    """Simulate one policy on one fleet: the typed result (`SimResult.payload()` is what a
    `simulate.run` event stores)."""
    p = plan(config, fleet)
    t0 = time.perf_counter()
    tl = simulate(p, progress)
    return summarize(p, tl, time.perf_counter() - t0)


# Sweepable policies: CLI name -> SimConfig field.
SWEEPS: dict[str, str] = {
    "ckpt-interval": "ckpt_interval_min",
    "spare-domains": "spare_domains",
    "spare-trays": "spare_trays",
    "escalate-at": "escalate_at",
}


class SweepPoint(SimResult):
    """One run of a sweep: the swept value and the run's whole result."""

    value: float = Field(description="the swept parameter's value at this run")


class SweepOptimum(BaseModel):
    """The best value found: the highest mean ETTR (and, for a checkpoint-interval sweep
    with the best inside the range, the peak of a parabola through it and its neighbours)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    value: float
    ettr: MeanCI
    fitted_min: float | None = None


class SweepResult(YoungDaly):
    """A policy swept over values with the same seed (common random numbers); Young/Daly
    are at the optimum's failure rate and checkpoint cost."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    simulated: Literal[True] = True
    note: str = SIMULATED
    param: str = Field(description="the CLI name of the swept policy (SWEEPS)")
    field: str = Field(description="the SimConfig field it sets")
    values: list[float]
    points: list[SweepPoint]
    optimum: SweepOptimum
    young_min: float
    daly_min: float

    def as_dict(self) -> dict[str, Any]:
        """The sweep as `simulate sweep --json` prints it (`fitted_min` only when fitted;
        `storage`/`recovery` of a point only when it used them)."""
        out = self.model_dump(exclude={"points", "optimum"})
        out["points"] = [p.as_dict() for p in self.points]
        out["optimum"] = self.optimum.model_dump(exclude_none=True)
        return out


def sweep(config: SimConfig, fleet: FleetShape, param: str, values: list[float],
          progress: Callable[[int, float], None] | None = None) -> SweepResult:
    """Run one simulation per value (same seed: the same failures at every point)."""
    if param not in SWEEPS:
        raise SimulateError(f"unknown sweep parameter {param!r}; valid: {', '.join(SWEEPS)}")
    if not values:
        raise SimulateError("give at least one value to sweep")
    field = SWEEPS[param]
    configs = []
    for v in values:
        if field != "ckpt_interval_min" and float(v) != int(v):
            raise SimulateError(f"{param} takes whole numbers; got {v}")
        value = float(v) if field == "ckpt_interval_min" else int(v)
        configs.append(make_config(**(config.model_dump() | {field: value})))
    plans = [plan(cfg, fleet) for cfg in configs]  # every bad value fails before any run
    points = []
    for n, (v, p) in enumerate(zip(values, plans, strict=True)):
        t0 = time.perf_counter()
        tl = simulate(p, None if progress is None else functools.partial(progress, n))
        run = summarize(p, tl, time.perf_counter() - t0)
        points.append(SweepPoint.model_validate(run.model_dump() | {"value": v}))
    means = np.array([pt.ettr.mean for pt in points])
    best = int(np.argmax(means))
    fitted = None
    if field == "ckpt_interval_min" and 0 < best < len(values) - 1:
        fitted = _parabola_peak(values[best - 1:best + 2], means[best - 1:best + 2])
    return SweepResult(
        param=param, field=field, values=list(values), points=points,
        optimum=SweepOptimum(value=values[best], ettr=points[best].ettr, fitted_min=fitted),
        young_min=points[best].young_min, daly_min=points[best].daly_min)


def _parabola_peak(xs: list[float], ys: np.ndarray) -> float:
    """Peak of the parabola through three points, in log x (ETTR is near-symmetric there)."""
    lx = np.log(np.asarray(xs, dtype=float))
    a, b, _ = np.polyfit(lx, ys, 2)
    if a >= 0:
        return float(xs[int(np.argmax(ys))])
    return float(np.exp(np.clip(-b / (2 * a), lx.min(), lx.max())))
