"""The report's storage section: what the local cache and cross-region replication buy.

It shows the fleet's latest recorded `simulate storage-whatif` (`--record`): GPU-hours and money
per month for the simulated job, each setup's best checkpoint interval beside Young/Daly, and
which figures were measured (the storage profile) and which simulated (everything after it).
"""

from __future__ import annotations

from typing import Any

from rackscale.report.templates import macro
from rackscale.store import Event, SimulateStorageWhatifV1


def storage_section(ev: Event | None) -> dict[str, Any]:
    """The section of report.json from the latest what-if event: `not_run`, or its figures
    with their labels."""
    if ev is None:
        return {"status": "not_run"}
    w = ev.read(SimulateStorageWhatifV1)
    # the what-if's own figures beyond the job's: the model keeps them as they were written
    p = w.model_extra or {}
    ref = p.get("reference_interval_min")
    setups = {}
    for name, s in w.setups.items():
        at: dict[str, Any] = next(
            (pt for pt in s.get("points", []) if pt.get("interval_min") == ref), {})
        setups[name] = {"optimal_interval_min": s.get("optimal_interval_min"),
                        "optimal_ettr": s.get("optimal_ettr"), "young_min": s.get("young_min"),
                        "daly_min": s.get("daly_min"),
                        "lost_gpu_hours_at_reference": at.get("lost_gpu_hours"),
                        "lost_cost_at_reference": at.get("lost_cost")}
    figures = w.storage or {}
    return {
        "status": "ran", "seq": ev.seq, "time": ev.time.isoformat(),
        "job_gpus": p.get("job_gpus_allocated"), "days": w.days,
        "trials": w.trials, "gpu_hour_price": p.get("gpu_hour_price"),
        "reference_interval_min": ref, "buys_per_month": p.get("buys_per_month") or {},
        "setups": setups,
        "measured": {"basis": figures.get("basis"),
                     "figures": {k: v for k, v in figures.items()
                                 if k.endswith("_s") and v is not None}},
        "assumptions": figures.get("assumptions") or {},
        "simulated": p.get("note"),
    }


def _ci(v: Any, fmt: str = ",.0f") -> str:
    if not isinstance(v, dict) or v.get("mean") is None:
        return "—"
    ci = v.get("ci95")
    return format(v["mean"], fmt) + ("" if ci is None else f" ± {format(ci, fmt)}")


def _setup(name: str, s: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "interval": s["optimal_interval_min"],
            "ettr": _ci(s["optimal_ettr"], ".4f"), "young": _ci({"mean": s["young_min"]}, ".1f"),
            "daly": _ci({"mean": s["daly_min"]}, ".1f"),
            "lost": _ci(s["lost_gpu_hours_at_reference"])}


def render_storage(section: dict[str, Any]) -> str:
    """HTML of the section (templates/storage.html); every table says whether its figures
    are measured or simulated."""
    if section.get("status") != "ran":
        # `checkpoint profile --out` takes a directory and writes storage-profile.json in it.
        return ('<p class="notrun" id="storage">no storage what-if recorded: run `rackscale '
                'checkpoint profile --out rackscale-data`, then `rackscale simulate '
                'storage-whatif --storage rackscale-data/storage-profile.json --record`</p>')
    return macro("storage.html", "storage", {
        "job_gpus": section["job_gpus"], "trials": section["trials"], "days": section["days"],
        "price": section.get("gpu_hour_price"), "ref": section["reference_interval_min"],
        "buys": [{"what": what, "gpu_hours": _ci(v.get("gpu_hours")), "money": _ci(v.get("money"))}
                 for what, v in section["buys_per_month"].items()],
        "setups": [_setup(name, s) for name, s in section["setups"].items()],
        "basis": section["measured"]["basis"],
        # the assumptions are one line of text; joined here (a template's join would escape
        # to other entities than the page's)
        "assumed": ", ".join(f"{k} {v}" for k, v in section["assumptions"].items()),
        "measured": [(k, f"{v:.3f}") for k, v in section["measured"]["figures"].items()
                     if isinstance(v, int | float)]})
