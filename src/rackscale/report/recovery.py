"""The report's recovery section: every supervised job's incidents, as measured.

Per incident: the time to detect, localize, restart (decision to every new rank launched),
restore (the slowest rank's checkpoint load) and the first step after it, and the work lost.
Summed into badput buckets the way goodput accounting splits a job's lost time: detection
(fault to decision), restart (decision to the first step, less the restore), restore, and
lost work (steps done past the checkpoint, recomputed). Every figure is measured on the
supervisor's host; none is simulated. The section is computed from the `recovery.incident`
events of the evidence bundle, so a verifier recomputes it.
"""

from __future__ import annotations

import statistics
from html import escape
from typing import Any

from rackscale.incidents import BADPUT_BUCKETS as BUCKETS
from rackscale.incidents import RECOVERY_INCIDENT as INCIDENT
from rackscale.incidents import incident_row

# The phases the page's table shows (every phase is in report.json's rows).
TIMES = ("detect_s", "localize_s", "restart_s", "restore_s", "first_step_s", "downtime_s")


def recovery_section(events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """report.json's `recovery`: `not_run` without incidents, else every incident (event
    dicts as the bundle holds them) with the badput totals."""
    rows = [incident_row(e["payload"], seq=e.get("seq"), time=e.get("time"),
                         component=e.get("component"))
            for e in events or [] if e.get("kind") == INCIDENT]
    if not rows:
        return {"status": "not_run"}
    totals = {b: round(sum(r["badput_s"][b] or 0.0 for r in rows), 4) for b in BUCKETS}
    costs = [r["restart_cost_s"] for r in rows if r["restart_cost_s"] is not None]
    return {"status": "measured", "incidents": rows,
            "badput_s": totals | {"total": round(sum(totals.values()), 4)},
            "median_restart_cost_s": round(statistics.median(costs), 4) if costs else None,
            "hosts": sorted({r["measured"]["where"] for r in rows})}


def _s(v: Any) -> str:
    return "—" if v is None else f"{float(v):.3f}"


def render_recovery(section: dict[str, Any]) -> str:
    """HTML of the section; its figures are all measured, and it says where."""
    if section.get("status") != "measured":
        return ('<p class="notrun" id="recovery">no recovery incident recorded: run a job '
                'under `rackscale job run --db ...` (or `rackscale job train-demo`)</p>')
    rows = "".join(
        f"<tr><th>{escape(str(r['job']))} #{escape(str(r['attempt']))}</th>"
        f"<td>{escape(str(r['symptom']))}</td><td>{escape(str(r['component']))}</td>"
        + "".join(f"<td>{_s(r[k])}</td>" for k in TIMES)
        + f"<td>{escape(str(r['work_lost_steps']))} ({_s(r['badput_s']['lost_work'])} s)</td>"
        f"<td>{escape(str(r['outcome']))}</td></tr>"
        for r in section["incidents"])
    heads = "".join(f"<th>{escape(k.removesuffix('_s').replace('_', ' '))} (s)</th>"
                    for k in TIMES)
    badput = "".join(f"<tr><th>{escape(b.replace('_', ' '))}</th><td>{_s(v)}</td></tr>"
                     for b, v in section["badput_s"].items())
    where = "; ".join(escape(h) for h in section["hosts"])
    return (f'<p><span class="basis b-measured">measured (real)</span> {where}; '
            f'{len(section["incidents"])} incidents, median restart cost (fault to the job '
            f'running again) {_s(section["median_restart_cost_s"])} s.</p>'
            f'<table id="recovery-incidents"><tr><th>job #attempt</th><th>symptom</th>'
            f'<th>excluded</th>{heads}<th>work lost steps</th><th>outcome</th></tr>{rows}'
            f'</table><table id="recovery-badput"><tr><th>badput bucket</th>'
            f'<th>seconds (measured)</th></tr>{badput}</table>')
