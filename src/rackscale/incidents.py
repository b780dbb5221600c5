"""What one interruption of a supervised job costs: one rule, read by the recovery room that
writes incidents, the report that shows them and the simulator that can use them instead of its
assumed restart time. Like `rackscale.provenance` it imports nothing of rackscale, so every
room (the simulator included, which may not read the store) can use it."""

from __future__ import annotations

from typing import Any

RECOVERY_INCIDENT = "recovery.incident"
"""The event kind of one recovery (payload model: `rackscale.store.RecoveryIncidentV1`)."""

__all__ = ["RECOVERY_INCIDENT", "incident_restart_cost_s"]


def incident_restart_cost_s(p: dict[str, Any]) -> float | None:
    """Fault to the job running again (detect + decision to the first step; the launch when
    no first step was seen): what one interruption costs beside the lost work; None when the
    restart was not completed. The report's recovery section and the simulator's measured
    restart cost both use it."""
    down = p.get("downtime_s") if p.get("downtime_s") is not None else p.get("restart_s")
    if p.get("detect_s") is None or down is None:
        return None
    return float(p["detect_s"]) + float(down)
