"""The fleet's current truth: conditions per part (type, status, reason, evidence seq, since),
folded incrementally from the typed event log. The one place that says whether a part may
serve; the lifecycle's gates and triage, the report, the server and the bundle read it."""

from rackscale.state.conditions import Condition, ConditionType, Status
from rackscale.state.model import FOLDED_KINDS, FleetState, Gate, LifecycleState
from rackscale.state.serving import (
    BAD_TRAY_STATE_NAMES,
    SERVING_RACK_STATE_NAMES,
    serves,
    serving_state,
)

__all__ = ["BAD_TRAY_STATE_NAMES", "FOLDED_KINDS", "SERVING_RACK_STATE_NAMES", "Condition",
           "ConditionType", "FleetState", "Gate", "LifecycleState", "Status", "serves",
           "serving_state"]
