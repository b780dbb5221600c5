"""Storage under a soak: which checkpoint tiers a soak's job used (soak.json's `storage`), and
two soaks of one schedule, the job's local cache on and off, set beside what `simulate
storage-whatif` predicts for the same change.

Measured, from each soak.json: the restore per restart (the slowest rank's load, mean over
the faults the job recovered from), the lost work times the job's GPUs, all the GPU-time the
job lost ((1 - ETTR) x window x GPUs) and the ETTR with its 95% interval. Simulated: the
storage what-if's "cache only" and "neither" setups (the lab's job has no replica), fed the
same failure rates, job shape and window as the soak's own prediction (`predict.py`), the
restart without its restore as measured (mean of both soaks), and the restore from each tier
as measured: from the local cache = the cache-on soak's, from the region = the cache-off
soak's. The job's trainer saves synchronously (DCP waits for the tiers), so a checkpoint is
durable in the cache and the region when its save ends: the save's stall is the soak's
measured cost per checkpoint, and so are both durable times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rackscale.checkpoint import TiersConfig, load_config
from rackscale.errors import UserError
from rackscale.recovery import job_tiers
from rackscale.simulate import SimulateError, StorageTimes, storage_whatif
from rackscale.soak.predict import lab_shape, mean_or_none, measured_costs, sim_config
from rackscale.soak.schedule import Schedule

TRIALS = 2000
DEFAULT_CKPT_EVERY = 10  # `job soak --ckpt-every`'s default, for a soak.json that omits it
ON, OFF = "cache only", "neither"  # the what-if's setups: cache on and off, no replication
SAME = ("seed", "faults", "failure_model", "rate_scale")


class StorageCompareError(UserError):
    pass


def tiers_of(config: Path | None, job_dir: Path) -> TiersConfig:
    """The tiers a soak's job uses: the config given, else the job's default tiers."""
    return load_config(config) if config is not None else job_tiers(job_dir)


def storage_summary(config: Path | None, job_dir: Path) -> dict[str, Any]:
    """soak.json's `storage`: the config file and which tiers are on."""
    cfg = tiers_of(config, job_dir)
    return {"config": str(config) if config is not None else None,
            "basis": ("the tiers config given (--config)" if config is not None else
                      "the job's default tiers (directories under its job directory)"),
            "local_cache": cfg.local_cache, "replication": bool(cfg.replicas),
            "region": cfg.region.name, "replicas": [r.name for r in cfg.replicas],
            "archive": cfg.archive.name if cfg.archive is not None else None}


def _recovered(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in result.get("faults", []) if r.get("recovered")]


def measured_side(result: dict[str, Any]) -> dict[str, Any]:
    """One soak's storage figures (module doc), all measured."""
    rows = _recovered(result)
    gpus = int(result["job"]["gpus"])
    window, e = float(result["window_s"]), result["ettr"]
    lost_work = float(result["badput_s"].get("lost_work", 0.0))
    return {
        "storage": result.get("storage"),
        "restarts": len(rows),
        "restore_s_per_restart": mean_or_none([float(r["badput_s"]["restore"]) for r in rows]),
        "restart_s_without_restore": mean_or_none([sum(float(r["badput_s"][k]) for k in (
            "stop", "localization", "restart")) for r in rows]),
        "lost_work_gpu_s": lost_work * gpus,
        "lost_gpu_s": (1 - float(e["value"])) * window * gpus,
        "ettr": {k: float(e[k]) for k in ("value", "lo", "hi")},
        "window_s": window, "gpus": gpus,
    }


def check_pair(on: dict[str, Any], off: dict[str, Any], on_name: str, off_name: str) -> None:
    """Refuse two soaks that are not one schedule run with the cache on, then off."""
    for name, r in ((on_name, on), (off_name, off)):
        missing = [k for k in ("schedule", "job", "ettr", "badput_s", "window_s", "faults")
                   if k not in r]
        if missing:
            raise StorageCompareError(f"{name}: not a soak result (no {', '.join(missing)}); "
                                      "give the soak.json a `job soak` wrote")
    for name, r, want in ((on_name, on, True), (off_name, off, False)):
        st = r.get("storage")
        if not isinstance(st, dict) or st.get("local_cache") is not want:
            said = "no storage record" if not isinstance(st, dict) else \
                f"local_cache {st.get('local_cache')}"
            raise StorageCompareError(
                f"{name}: {said}; the cache-{'on' if want else 'off'} soak must say "
                f"storage.local_cache {str(want).lower()} (run it with `job soak` "
                f"{'and no --config' if want else '--config FILE, local_cache: false'})")
    differ = [f"{k} {on['schedule'].get(k)} vs {off['schedule'].get(k)}" for k in SAME
              if on["schedule"].get(k) != off["schedule"].get(k)]
    if on["job"].get("gpus") != off["job"].get("gpus"):
        differ.append(f"job GPUs {on['job'].get('gpus')} vs {off['job'].get('gpus')}")
    if differ:
        raise StorageCompareError(f"{on_name} and {off_name} ran different schedules "
                                  f"({'; '.join(differ)}); run the second with --schedule "
                                  "and the first one's schedule.json")


def storage_times(on: dict[str, Any], off: dict[str, Any], ckpt_cost_s: float) -> StorageTimes:
    """The what-if's storage figures from the two soaks (module doc)."""
    local, region = (measured_side(r)["restore_s_per_restart"] for r in (on, off))
    if local is None or region is None:
        which = "cache-on" if local is None else "cache-off"
        raise StorageCompareError(f"the {which} soak recovered from no fault, so it measured "
                                  "no restore; run soaks with at least one fault")
    return StorageTimes(save_stall_s=ckpt_cost_s, durable_local_s=ckpt_cost_s,
                        durable_region_s=ckpt_cost_s, restore_local_s=local,
                        restore_region_s=region, local_cache=True, replication=False,
                        source="measured on two soaks of one schedule (restore per restart: "
                        "cache on = local, cache off = region)")


def _setup(w: dict[str, Any], name: str) -> dict[str, Any]:
    ref = w["reference_interval_min"]
    pt = next(p for p in w["setups"][name]["points"] if p["interval_min"] == ref)
    n = pt["interruptions"]
    return {"ettr": pt["ettr"], "restore_s_per_restart": pt["restore_hours"] * 3600 / n
            if n > 0 else None,
            "lost_gpu_s": {k: v * 3600 for k, v in pt["lost_gpu_hours"].items()},
            "interruptions": n}


def simulated_side(on: dict[str, Any], off: dict[str, Any], schedule: Schedule, *,
                   trials: int = TRIALS, seed: int = 0) -> dict[str, Any]:
    """What `simulate storage-whatif` predicts for cache off vs on, for this soak's job."""
    every = on["job"].get("ckpt_every") or DEFAULT_CKPT_EVERY
    cfg, inputs = sim_config(on, schedule, every, trials, seed)
    u0 = mean_or_none([x for x in (measured_side(r)["restart_s_without_restore"] for r in (on, off))
                if x is not None]) or 0.0
    base = cfg.model_copy(update={"restart_min": u0 / 60})
    st = storage_times(on, off, float(measured_costs(on, every)["ckpt_cost_s"] or 0.0))
    try:
        w = storage_whatif(base, lab_shape(schedule, cfg), st, [base.ckpt_interval_min])
    except SimulateError as err:
        raise StorageCompareError(f"the soaks' figures do not make a storage what-if ({err}); "
                                  "check the soak.json files") from None
    month = 30 / w["days"]  # the what-if scales its paired differences to 30 days
    saved = w["buys_per_month"]["local cache (without replication)"]["gpu_hours"]
    inputs = inputs | {"restart_min": {"value": round(u0 / 60, 6), "basis": "measured",
                                       "from": "stop + localization + restart, without the "
                                       "restore, mean per restart of both soaks"}}
    return {"simulated": True, "note": w["note"], "on": _setup(w, ON), "off": _setup(w, OFF),
            # paired over the same failures: what turning the cache off costs over the window
            "off_minus_on_lost_gpu_s": {k: v * 3600 / month for k, v in saved.items()},
            "storage": w["storage"], "inputs": inputs, "trials": trials, "seed": seed}


def compare(on: dict[str, Any], off: dict[str, Any], schedule: Schedule, *,
            names: tuple[str, str] = ("cache on", "cache off"),
            trials: int = TRIALS, seed: int = 0) -> dict[str, Any]:
    """The measured difference (cache off - cache on) beside the simulated one."""
    check_pair(on, off, *names)
    m_on, m_off = measured_side(on), measured_side(off)

    def diff(key: str) -> float | None:
        a, b = m_off[key], m_on[key]
        return None if a is None or b is None else a - b

    sim = simulated_side(on, off, schedule, trials=trials, seed=seed)
    s_on, s_off = sim["on"], sim["off"]
    r_on, r_off = s_on["restore_s_per_restart"], s_off["restore_s_per_restart"]
    return {
        "measured": {"on": m_on, "off": m_off, "off_minus_on": {
            "restore_s_per_restart": diff("restore_s_per_restart"),
            "lost_work_gpu_s": diff("lost_work_gpu_s"), "lost_gpu_s": diff("lost_gpu_s"),
            "ettr_pp": (m_off["ettr"]["value"] - m_on["ettr"]["value"]) * 100}},
        "simulated": sim | {"off_minus_on": {
            "restore_s_per_restart": None if r_on is None or r_off is None else r_off - r_on,
            "lost_gpu_s": sim["off_minus_on_lost_gpu_s"],
            "ettr_pp": (s_off["ettr"]["mean"] - s_on["ettr"]["mean"]) * 100}},
        "schedule": on["schedule"], "hosts": sorted({on.get("host"), off.get("host")} - {None}),
    }
