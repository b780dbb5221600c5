"""Rack and tray lifecycle: state machines, interlocks, the reconcile controller, drivers
(Redfish, simulated power and CDU), Slurm drain/resume, certification triage."""

from rackscale.fleet import CduReading
from rackscale.lifecycle.controller import Controller
from rackscale.lifecycle.cooling import coolant_conditions, coolant_responses, enrolled_racks
from rackscale.lifecycle.drivers import (
    CduTelemetry,
    CoolingDriver,
    DriverError,
    PowerDriver,
    SimCoolingDriver,
    SimPlant,
    SimPowerDriver,
    power_targets,
)
from rackscale.lifecycle.interlocks import (
    CoolantTier,
    FaultPolicy,
    InterlockRefused,
    LeakTier,
    flow_ok,
)
from rackscale.lifecycle.passes import PassReport, RunOutcome
from rackscale.lifecycle.redfish import RedfishPowerDriver
from rackscale.lifecycle.repairs import RepairRefused, RepairResult, repair
from rackscale.lifecycle.repository import (
    INTERLOCK,
    NOTED,
    SLURM,
    TRANSITION,
    EvidenceMissing,
    LifecycleRow,
    UnknownLifecycleComponent,
    change_of,
    counts,
    enroll,
    history,
    history_events,
    moved,
    open_store,
    set_goal,
    state_of,
    transition,
    trays_of,
)
from rackscale.lifecycle.service import drain, drain_out_of_service
from rackscale.lifecycle.slurm import (
    REASON_PREFIX,
    ScontrolSlurm,
    SimSlurm,
    SlurmControl,
    node_name,
)
from rackscale.lifecycle.slurm_topology import (
    TopologyChange,
    TopologySync,
    topology_plugin,
    topology_sync,
)
from rackscale.lifecycle.states import RACK as RACK_MACHINE
from rackscale.lifecycle.states import (
    RACK_TRANSITIONS,
    SERVING_RACK_STATES,
    TRAY_TRANSITIONS,
    IllegalTransition,
    RackState,
    TrayState,
    check,
    parse_state,
)
from rackscale.lifecycle.states import TRAY as TRAY_MACHINE
from rackscale.lifecycle.triage import PassTriage, TriageReport, apply_findings, promote_passing

__all__ = [
    "INTERLOCK",
    "NOTED",
    "RACK_MACHINE",
    "RACK_TRANSITIONS",
    "REASON_PREFIX",
    "SERVING_RACK_STATES",
    "SLURM",
    "TRANSITION",
    "TRAY_MACHINE",
    "TRAY_TRANSITIONS",
    "CduReading",
    "CduTelemetry",
    "Controller",
    "CoolantTier",
    "CoolingDriver",
    "DriverError",
    "EvidenceMissing",
    "FaultPolicy",
    "IllegalTransition",
    "InterlockRefused",
    "LeakTier",
    "LifecycleRow",
    "PassReport",
    "PassTriage",
    "PowerDriver",
    "RackState",
    "RedfishPowerDriver",
    "RepairRefused",
    "RepairResult",
    "RunOutcome",
    "ScontrolSlurm",
    "SimCoolingDriver",
    "SimPlant",
    "SimPowerDriver",
    "SimSlurm",
    "SlurmControl",
    "TopologyChange",
    "TopologySync",
    "TrayState",
    "TriageReport",
    "UnknownLifecycleComponent",
    "apply_findings",
    "change_of",
    "check",
    "coolant_conditions",
    "coolant_responses",
    "counts",
    "drain",
    "drain_out_of_service",
    "enroll",
    "enrolled_racks",
    "flow_ok",
    "history",
    "history_events",
    "moved",
    "node_name",
    "open_store",
    "parse_state",
    "power_targets",
    "promote_passing",
    "repair",
    "set_goal",
    "state_of",
    "topology_plugin",
    "topology_sync",
    "transition",
    "trays_of",
]
