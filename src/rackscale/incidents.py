"""What one interruption of a supervised job costs: one rule, read by the recovery room that
writes incidents, the report that shows them and the simulator that can use them instead of its
assumed restart time. Like `rackscale.provenance` it imports nothing of rackscale, so every
room (the simulator included, which may not read the store) can use it."""

from __future__ import annotations

from typing import Any

RECOVERY_INCIDENT = "recovery.incident"
"""The event kind of one recovery (payload model: `rackscale.store.RecoveryIncidentV1`)."""

__all__ = ["BADPUT_BUCKETS", "INCIDENT_PHASES_S", "RECOVERY_INCIDENT", "incident_badput_s",
           "incident_restart_cost_s", "incident_row"]

# Every measured phase of an incident, in the order it happens (payload fields, seconds); a
# phase the incident never reached (no restart without a spare) is None.
INCIDENT_PHASES_S = ("detect_s", "localize_s", "stop_s", "restart_s", "start_s", "restore_s",
                     "first_step_s", "downtime_s")
# The badput buckets of goodput accounting that an incident's lost time splits into.
BADPUT_BUCKETS = ("detection", "restart", "restore", "lost_work")


def incident_restart_cost_s(p: dict[str, Any]) -> float | None:
    """Fault to the job running again (detect + decision to the first step; the launch when
    no first step was seen): what one interruption costs beside the lost work; None when the
    restart was not completed. The report's recovery section and the simulator's measured
    restart cost both use it."""
    down = p.get("downtime_s") if p.get("downtime_s") is not None else p.get("restart_s")
    if p.get("detect_s") is None or down is None:
        return None
    return float(p["detect_s"]) + float(down)


def incident_badput_s(p: dict[str, Any]) -> dict[str, float | None]:
    """An incident's lost time by badput bucket: detection (fault to decision), restart
    (decision to the first step, less the restore), restore, and lost work (steps done past
    the checkpoint, recomputed); None where the incident did not record it."""
    restore, down = p.get("restore_s"), p.get("downtime_s")
    restart = None if down is None else float(down) - float(restore or 0.0)
    lost = (None if p.get("step_s") is None or p.get("work_lost_steps") is None
            else round(float(p["work_lost_steps"]) * float(p["step_s"]), 4))
    return {"detection": p.get("detect_s"),
            "restart": None if restart is None else round(max(0.0, restart), 4),
            "restore": restore, "lost_work": lost}


def incident_row(payload: dict[str, Any], *, seq: int | None, time: str | None,
                 component: str | None) -> dict[str, Any]:
    """One incident as every reader shows it (the report's recovery section, the server's
    API, dashboard and metrics): the event's payload with every phase present (None when not
    reached), its restart cost, badput buckets and where it was measured."""
    p = payload
    host = p.get("host") or "host not recorded"
    return {**p, "seq": seq, "time": time, "job": p.get("job"), "attempt": p.get("attempt"),
            "symptom": p.get("symptom"), "component": component,
            "fault_kind": p.get("fault_kind"),
            "outcome": p.get("outcome", "resumed"),  # the payload model's default
            **{k: p.get(k) for k in INCIDENT_PHASES_S},
            "work_lost_steps": p.get("work_lost_steps"), "step_s": p.get("step_s"),
            "restart_cost_s": incident_restart_cost_s(p), "badput_s": incident_badput_s(p),
            "measured": {"basis": "measured", "where": f"supervisor of job {p.get('job')} on "
                         f"{host}", "on": str(component)}}
