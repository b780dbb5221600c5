"""The simulator's prediction of a soak: the simulator's own engine (what `simulate run` runs)
fed the soak's failure rates, its job's shape and its measured recovery costs, so its ETTR can
be set against the measured one.

What is fed (`inputs` of the result says where each figure came from):
- Rates: the schedule's failure model times its `rate_scale` (the per-component rates the
  schedule was drawn from); fail-slow at the schedule's ratio to fail-stop (stragglers and rack
  cooling, both slow faults on the lab); repair times compressed by the same factor, as the
  schedule's `model_repair_s` (the soak holds a spare for every fault, so none waits).
- Shape: the job's GPUs, each its own unit (the lab's GPU slots), and its spares; the horizon
  is the soak's measured window.
- Measured costs: the first launch (`initial_start`); per fail-stop, its detection; per
  restart (a fail-stop or a found straggler: the simulator has one restart cost), stop,
  localization, restart and restore; per slow fault, its time to be found and the job's
  slowdown while it ran degraded; checkpoints every `ckpt_every` clean steps, each costing the
  badput no cause explains (saves and the host's noise) spread over the checkpoints written.
  Lost work is not fed: it follows from the interval. A cost the soak did not measure (no
  such fault) is the simulator's assumption, labelled so.

Every figure of the result is simulated. The known departures of the model from the soak are
in `departures`; `differing` names those the per-cause badput shows.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rackscale.errors import UserError
from rackscale.simulate import (
    FleetShape,
    SimConfig,
    SimulateError,
    failure_model,
    make_config,
    plan,
    simulate,
    summarize,
)
from rackscale.soak.families import by_family
from rackscale.soak.schedule import Schedule

TRIALS = 2000
GOAL_PP = 3.0  # the goal: inside the measured 95% interval and within this many points
MAX_SLOWDOWN = 1000.0  # a slow fault under which the job made no progress at all
CRASH = ("fail_stop", "hang")
NEEDED = ("window_s", "clean_step_s", "badput_s", "faults", "job", "schedule", "ettr")
DEPARTURES = (
    "arrivals: the simulator draws a Poisson number of faults at the schedule's rates, at any "
    "time; the soak injects exactly the schedule's count, none during start-up and none while "
    "an earlier one is held or recovering",
    "kinds: the simulator's causes are fail-stop (HBM included) and its stragglers slow the "
    "whole job until found, then restart it; on the lab some causes are slow faults, and one "
    "never found runs degraded until lifted, with no restart",
    "causes the lab cannot inject (the schedule's left_out) stay in the simulator's mix",
)


class PredictError(UserError):
    pass


def _need(result: dict[str, Any], schedule: Schedule) -> None:
    missing = [k for k in NEEDED if k not in result]
    if missing:
        raise PredictError(f"not a soak result: no {', '.join(missing)}; give the soak.json "
                           "a `job soak` wrote")
    want = {"gpus": (result["job"].get("gpus"), schedule.gpus),
            "seed": (result["schedule"].get("seed"), schedule.seed),
            "failure model": (result["schedule"].get("failure_model"),
                              schedule.failure_model),
            "faults": (result["schedule"].get("faults"), schedule.count)}
    wrong = [f"{k} {a} vs {b}" for k, (a, b) in want.items() if a != b]
    if wrong:
        raise PredictError(f"the soak result and the schedule differ ({'; '.join(wrong)}); "
                           "give the schedule.json written beside that soak.json")
    if not float(result["window_s"]) > 0 or not float(result["clean_step_s"]) > 0:
        raise PredictError(f"window_s {result['window_s']} and clean_step_s "
                           f"{result['clean_step_s']}: both must be positive; give the "
                           "soak.json of a soak that ran")


def mean_or_none(xs: list[float]) -> float | None:
    return statistics.fmean(xs) if xs else None


def _detection(cost: dict[str, float | None],
               fed: Callable[[float | None, Any, str], dict[str, Any]]) -> dict[str, Any]:
    """The detection latency fed: the soak's fail-stop mean; with no fail-stop fault in the
    soak, the mean time to detect of the faults it did detect. The simulator counts causes
    the lab injects as slow (a degraded leaf, a flapping cable) as fail-stop, and without
    this fell back to its own assumed latency where the soak had measured one (a
    network-only soak: 191 s simulated against 2.6 s measured)."""
    if cost["detect_s"] is not None:
        return fed(cost["detect_s"] / 60, None, "detection, mean per fail-stop")
    if cost["any_detect_s"] is not None:
        return fed(cost["any_detect_s"] / 60, None, "no fail-stop fault in the soak: the "
                   "mean time to detect of the faults it detected")
    return fed(None, None, "detection, mean per fail-stop")


def measured_costs(result: dict[str, Any], ckpt_every: int) -> dict[str, float | None]:
    """The soak's recovery costs in seconds, means per fault (None: no such fault measured)."""
    rows, bad = result["faults"], result["badput_s"]
    crash = [r for r in rows if (r.get("named") or {}).get("symptom") in CRASH]
    restarted = [r for r in rows if r.get("recovered")]
    slow = [r for r in rows if r not in crash and r.get("action") not in ("kill", "hang")]
    found, ran = [], []
    for r in slow:  # found: its time to detect; never found: it ran degraded until lifted
        t = r.get("time_to_detect_s") if r.get("detected") else (
            float(r["lifted_at"]) - float(r["injected_at"]) if "lifted_at" in r else None)
        if t is not None and t > 0:
            found.append(float(t))
            ran.append(float(r["badput_s"].get("running_degraded", 0.0)))
    slowdown = None
    if found:
        slowdown = min(MAX_SLOWDOWN, sum(found) / max(sum(found) - sum(ran),
                                                      sum(found) / MAX_SLOWDOWN))
    ckpts = max(1, int(result.get("steps_completed", 0)) // ckpt_every)
    return {
        "initial_start_s": float(bad.get("initial_start", 0.0)),
        "detect_s": mean_or_none([float(r["badput_s"]["detection"]) for r in crash]),
        # any fault's time to detect: what a soak with no fail-stop fault measured of detection
        "any_detect_s": mean_or_none([float(r["time_to_detect_s"]) for r in rows
                                      if r.get("detected") and r.get("time_to_detect_s")
                                      is not None]),
        "restart_s": mean_or_none([sum(float(r["badput_s"][k]) for k in (
            "stop", "localization", "restart", "restore")) for r in restarted]),
        "slow_found_s": mean_or_none(found),
        "slowdown": max(1.0, slowdown) if slowdown is not None else None,
        # what each checkpoint costs the loop, the host's noise charged with it (as before
        # the saves were measured apart)
        "ckpt_cost_s": max(0.0, float(bad.get("checkpoint", 0.0))
                           + float(bad.get("other", 0.0))) / ckpts,
    }


def _fail_slow_ratio(schedule: Schedule) -> float:
    """The schedule's fail-slow rate over its fail-stop rate (stragglers and cooling): what
    its expected count was computed with (schedule.draw)."""
    m = failure_model(schedule.failure_model)
    per = m.rate_per_gpu_h * schedule.gpus * schedule.duration_s / 3600
    return min(100.0, max(0.0, schedule.expected_unscaled / per - 1)) if per > 0 else 0.0


def sim_config(result: dict[str, Any], schedule: Schedule, ckpt_every: int, trials: int,
            seed: int) -> tuple[SimConfig, dict[str, dict[str, Any]]]:
    """The simulator's config, and each fed figure with where it came from."""
    cost = measured_costs(result, ckpt_every)
    d = SimConfig.model_fields
    clean = float(result["clean_step_s"])
    scale = schedule.rate_scale if schedule.rate_scale > 0 else 1.0

    def fed(value: float | None, default: Any, what: str) -> dict[str, Any]:
        if value is None:
            return {"value": default, "basis": "assumed (the simulator's; the soak measured "
                    "none)", "from": what}
        return {"value": round(value, 6), "basis": "measured", "from": what}

    inputs: dict[str, dict[str, Any]] = {
        "failure_model": {"value": schedule.failure_model, "basis": "schedule"},
        "rate_scale": {"value": scale, "basis": "schedule", "from": "rate_scale" if
                       schedule.rate_scale > 0 else "no faults drawn: the published rates"},
        "repair_scale": {"value": 1 / scale, "basis": "schedule", "from": "repair times "
                         "compressed by rate_scale (model_repair_s)"},
        "straggler_ratio": {"value": round(_fail_slow_ratio(schedule), 6), "basis": "schedule",
                            "from": "fail-slow (stragglers, cooling) per fail-stop"},
        "job_gpus": {"value": schedule.gpus, "basis": "schedule"},
        "spare_domains": {"value": int(result["job"].get("spares", 0)), "basis": "measured",
                          "from": "the soak's spare GPU slots, one GPU a unit"},
        "days": {"value": float(result["window_s"]) / 86400, "basis": "measured",
                 "from": "the soak's window, launch to stop"},
        "ckpt_interval_min": {"value": ckpt_every * clean / 60, "basis": "measured",
                              "from": f"ckpt_every {ckpt_every} x clean step {clean} s"},
        "start_min": fed(float(cost["initial_start_s"] or 0.0) / 60, 0.0,
                         "initial_start, launch to first step"),
        "detect_min": _detection(cost, fed),
        "restart_min": fed(None if cost["restart_s"] is None else cost["restart_s"] / 60,
                           d["restart_min"].default, "stop + localization + restart + "
                           "restore, mean per restart"),
        "straggler_detect_min": fed(None if cost["slow_found_s"] is None
                                    else cost["slow_found_s"] / 60,
                                    d["straggler_detect_min"].default,
                                    "time to find a slow fault (never found: held)"),
        "straggler_slowdown": fed(cost["slowdown"], d["straggler_slowdown"].default,
                                  "time degraded / progress made while it ran degraded"),
        "ckpt_cost_s": fed(cost["ckpt_cost_s"], d["ckpt_cost_s"].default,
                           "badput `other` (saves, the host's noise) per checkpoint"),
    }
    values = {k: v["value"] for k, v in inputs.items()}
    try:
        cfg = make_config(**values, align="tray", trials=trials, seed=seed)
    except SimulateError as err:
        raise PredictError(f"the soak's figures do not make a simulation ({err}); check "
                           "the soak.json") from None
    return cfg, inputs


def lab_shape(schedule: Schedule, cfg: SimConfig) -> FleetShape:
    """The lab as the simulator sees it: one domain of GPU slots, each slot its own unit."""
    slots = schedule.gpus + (cfg.spare_domains or 0)
    return FleetShape(name="lab", domains=1, trays_per_domain=slots, gpus_per_tray=1,
                      template="lab GPU slots")


def predict(result: dict[str, Any], schedule: Schedule, *, ckpt_every: int | None = None,
            trials: int = TRIALS, seed: int = 0) -> dict[str, Any]:
    """The simulator's ETTR for this soak (module doc): mean over `trials`, its 95% CI, and
    the spread of one soak (`ettr_lo`/`ettr_hi`: 2.5th and 97.5th percentiles of the trials).
    `ckpt_every`: the soak's --ckpt-every when its result does not say it."""
    _need(result, schedule)
    every = ckpt_every if ckpt_every is not None else result["job"].get("ckpt_every")
    if not isinstance(every, int) or every < 1:
        raise PredictError("the soak result does not say its checkpoint interval; give "
                           "ckpt_every (the soak's --ckpt-every, 10 unless it was set)")
    cfg, inputs = sim_config(result, schedule, every, trials, seed)
    p = plan(cfg, lab_shape(schedule, cfg))
    t0 = time.perf_counter()
    tl = simulate(p)
    res = summarize(p, tl, time.perf_counter() - t0)
    per = tl.work / p.horizon_h
    half = res.ettr.ci95 if isinstance(res.ettr.ci95, float) else 0.0
    lost = {k: v * 3600 for k, v in res.lost_hours_by_cause.items()}
    return {
        "simulated": True,
        "basis": "simulated: the simulator's engine (as `simulate run`) fed the schedule's "
                 "failure rates, the soak's job shape and window, and its measured recovery "
                 "costs; not measured",
        "ettr": round(res.ettr.mean, 4), "ettr_ci95": round(half, 4),
        "ettr_lo": round(float(np.percentile(per, 2.5)), 4),
        "ettr_hi": round(float(np.percentile(per, 97.5)), 4),
        "spread": f"2.5th..97.5th percentile over {trials} trials (one soak's outcome)",
        "interruptions": round(res.interruptions.mean, 3),
        "stragglers": round(res.stragglers, 3),
        "badput_s": {"initial_start+restart": round(lost["restart"], 3),
                     "detection": round(lost["detection"], 3),
                     "running_degraded": round(lost["straggler slowdown"], 3),
                     "lost_work": round(lost["recompute"], 3),
                     "other": round(lost["checkpoint writes"], 3),
                     "waiting": round(lost["waiting for repair or spare"], 3)},
        "inputs": inputs, "trials": trials, "seed": seed,
        # measured, per family: what the pooled inputs above average over (soak.families)
        "by_family": by_family(result),
        "departures": list(DEPARTURES),
    }


def prediction(result: dict[str, Any], schedule: Schedule) -> dict[str, Any]:
    """`predict`, or why there is none: a soak's measured result is kept whatever its
    prediction does."""
    try:
        return predict(result, schedule)
    except UserError as err:
        return {"simulated": True, "ettr": None, "why": str(err)}


# What each badput group stands for in the simulator: the assumption to question when the
# simulated and measured figures part.
ASSUMES = {
    "initial_start+restart": "one restart cost for every interruption (the measured mean), "
                             "and the first launch as measured; faults during start-up restart "
                             "it in the simulator, never on the lab",
    "detection": "one detection latency for every fail-stop cause (the measured mean); the "
                 "simulator treats causes the lab injects as slow faults (HBM) as fail-stop",
    "running_degraded": "one slowdown and one time-to-find for every slow fault; a slow fault "
                        "the lab never found ran degraded until lifted, with no restart",
    "lost_work": "work lost uniform within the checkpoint interval, and a Poisson number of "
                 "faults; the soak's faults fell where they fell",
    "other": "checkpoint saves and the host's noise charged per checkpoint at the measured "
             "mean",
}
GAP_PP = 1.0  # a badput group whose figures part by at least this much of the ETTR is named


def verdict(result: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    """The prediction against the measured ETTR: inside its 95% interval, the difference in
    percentage points (predicted - measured), and whether the goal (inside the interval and
    within GOAL_PP) is met."""
    e, p = result["ettr"], predicted.get("ettr")
    if p is None:
        return {"predicted": None, "why": predicted.get("why", "no prediction")}
    diff = (float(p) - float(e["value"])) * 100
    inside = float(e["lo"]) <= float(p) <= float(e["hi"])
    return {"measured": e["value"], "lo": e["lo"], "hi": e["hi"], "predicted": p,
            "difference_pp": round(diff, 2), "inside": inside,
            "met": inside and abs(diff) <= GOAL_PP}


def _measured_groups(bad: dict[str, float]) -> dict[str, float]:
    return {"initial_start+restart": sum(float(bad.get(k, 0.0)) for k in (
        "initial_start", "stop", "localization", "restart", "restore")),
        **{k: float(bad.get(k, 0.0)) for k in ("detection", "running_degraded", "lost_work")},
        "other": float(bad.get("checkpoint", 0.0)) + float(bad.get("other", 0.0))}


def differing(result: dict[str, Any], predicted: dict[str, Any]) -> list[str]:
    """The assumptions whose badput parts most between simulator and soak (largest first),
    and the fault count when it does."""
    if predicted.get("ettr") is None:
        return []
    window = float(result["window_s"])
    sim = predicted["badput_s"]
    rows = []
    for k, m in _measured_groups(result["badput_s"]).items():
        s = float(sim.get(k, 0.0)) + (float(sim.get("waiting", 0.0)) if k == "other" else 0.0)
        gap = (s - m) / window * 100
        if abs(gap) >= GAP_PP:
            rows.append((abs(gap), f"{k}: simulated {s:.1f} s vs measured {m:.1f} s "
                         f"(moves the prediction {-gap:+.1f} pp): {ASSUMES[k]}"))
    out = [line for _, line in sorted(rows, reverse=True)]
    n_sim, n_meas = float(predicted["interruptions"]), int(result.get("incidents", 0))
    if abs(n_sim - n_meas) >= 0.5:
        out.append(f"interruptions: simulated {n_sim:.2f} on average vs {n_meas} incidents "
                   f"measured: {DEPARTURES[0]}")
    return out
