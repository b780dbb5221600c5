"""The report's storage section: what the local cache and cross-region replication buy.

It shows the fleet's latest recorded `simulate storage-whatif` (`--record`): GPU-hours and money
per month for the simulated job, each setup's best checkpoint interval beside Young/Daly, and
which figures were measured (the storage profile) and which simulated (everything after it).
"""

from __future__ import annotations

from html import escape
from typing import Any

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


def render_storage(section: dict[str, Any]) -> str:
    """HTML of the section; every table says whether its figures are measured or simulated."""
    if section.get("status") != "ran":
        # `checkpoint profile --out` takes a directory and writes storage-profile.json in it.
        return ('<p class="notrun" id="storage">no storage what-if recorded: run `rackscale '
                'checkpoint profile --out rackscale-data`, then `rackscale simulate '
                'storage-whatif --storage rackscale-data/storage-profile.json --record`</p>')
    price = section.get("gpu_hour_price")
    buys = "".join(
        f"<tr><th>{escape(what)}</th><td>{_ci(v.get('gpu_hours'))}</td>"
        f"<td>{_ci(v.get('money'))}</td></tr>"
        for what, v in section["buys_per_month"].items())
    setups = "".join(
        f"<tr><th>{escape(name)}</th><td>{escape(str(s['optimal_interval_min']))}</td>"
        f"<td>{_ci(s['optimal_ettr'], '.4f')}</td>"
        f"<td>{_ci({'mean': s['young_min']}, '.1f')} / {_ci({'mean': s['daly_min']}, '.1f')}"
        f"</td><td>{_ci(s['lost_gpu_hours_at_reference'])}</td></tr>"
        for name, s in section["setups"].items())
    measured = "".join(f"<tr><th>{escape(k)}</th><td>{v:.3f}</td></tr>"
                       for k, v in section["measured"]["figures"].items()
                       if isinstance(v, int | float))
    assumed = ", ".join(f"{escape(k)} {escape(str(v))}" for k, v in
                        section["assumptions"].items())
    ref = section["reference_interval_min"]
    return (
        '<p><span class="basis b-simulated">simulated (twin)</span> '
        f'{escape(str(section["job_gpus"]))} GPUs, {escape(str(section["trials"]))} trials '
        f'of {escape(str(section["days"]))} days, '
        f'same failures in every setup; priced at {escape(str(price))} per GPU-hour, checkpoint '
        f'every {escape(str(ref))} min.</p>'
        f'<table id="storage-buys"><tr><th>what it buys per 30-day month</th>'
        f'<th>GPU-hours ± 95% CI</th><th>money ± 95% CI</th></tr>{buys}</table>'
        f'<table id="storage-setups"><tr><th>setup</th><th>best interval (min)</th>'
        f'<th>ETTR there</th><th>Young / Daly (min)</th><th>lost GPU-h at {escape(str(ref))}'
        f' min</th></tr>{setups}</table>'
        f'<p><span class="basis b-measured">measured (real)</span> '
        f'{escape(str(section["measured"]["basis"]))}; assumptions: {assumed or "none"}.</p>'
        f'<table id="storage-measured"><tr><th>storage figure (s, at the job\'s share)</th>'
        f'<th>value</th></tr>{measured}</table>')
