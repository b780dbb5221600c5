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
from typing import Any

from rackscale.incidents import BADPUT_BUCKETS as BUCKETS
from rackscale.incidents import RECOVERY_INCIDENT as INCIDENT
from rackscale.incidents import incident_row
from rackscale.report.templates import macro
from rackscale.store import RecoveryIncidentV1, carried_payload

# The phases the page's table shows (every phase is in report.json's rows).
TIMES = ("detect_s", "localize_s", "restart_s", "restore_s", "first_step_s", "downtime_s")


def recovery_section(events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """report.json's `recovery`: `not_run` without incidents, else every incident (event
    dicts as the bundle holds them) with the badput totals."""
    rows = [incident_row(carried_payload(e, RecoveryIncidentV1).dump(), seq=e.get("seq"),
                         time=e.get("time"),
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


def _incident(r: dict[str, Any]) -> dict[str, Any]:
    return {"job": r["job"], "attempt": r["attempt"], "symptom": r["symptom"],
            "component": r["component"], "times": [_s(r[k]) for k in TIMES],
            "work_lost_steps": r["work_lost_steps"], "lost_work": _s(r["badput_s"]["lost_work"]),
            "outcome": r["outcome"]}


def render_recovery(section: dict[str, Any]) -> str:
    """HTML of the section (templates/recovery.html); its figures are all measured, and it
    says where."""
    if section.get("status") != "measured":
        return ('<p class="notrun" id="recovery">no recovery incident recorded: run a job '
                'under `rackscale job run --db ...` (or `rackscale job train-demo`)</p>')
    return macro("recovery.html", "recovery", {
        "where": "; ".join(section["hosts"]), "median": _s(section["median_restart_cost_s"]),
        "heads": [k.removesuffix("_s").replace("_", " ") for k in TIMES],
        "incidents": [_incident(r) for r in section["incidents"]],
        "badput": [(b.replace("_", " "), _s(v)) for b, v in section["badput_s"].items()]})
