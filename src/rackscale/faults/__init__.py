"""Fault kinds, the faults file, the digital twin that applies them, and a CDU driver on the
twin (lifecycle's CoolingDriver, structurally). All figures simulated."""

from rackscale.faults.cooling import (
    HEALTHY_MARGIN,
    SUPPLY_C,
    TwinCduReading,
    TwinCoolingDriver,
    TwinCoolingError,
)
from rackscale.faults.kinds import (
    BAD_CABLE,
    COOLANT_FLOW_LOW,
    FAULT_KINDS,
    FLAPPING,
    GPU_DEAD,
    HBM_DEGRADED,
    LEAF_DEGRADED,
    LEAF_DOWN,
    NIC_DEAD,
    NVLINK_PORT_DOWN,
    NVLINK_SWITCH_DEGRADED,
    NVLINK_SWITCH_DOWN,
    POWER_SHELF_DOWN,
    SDC,
    SLOW_GPU,
    FaultKind,
    UnknownFaultKind,
    get_kind,
)
from rackscale.faults.spec import (
    DEFAULT_FLAP_PERIOD_S,
    DEFAULT_FLAP_SEVERITY,
    Fault,
    FaultsFile,
    demo_faults_path,
    faults_from,
    load_faults,
    parse_faults,
)
from rackscale.faults.twin import FabricState, ThermalReading, TwinHardware

__all__ = [
    "BAD_CABLE", "COOLANT_FLOW_LOW", "DEFAULT_FLAP_PERIOD_S", "DEFAULT_FLAP_SEVERITY",
    "FAULT_KINDS", "FLAPPING", "GPU_DEAD", "HBM_DEGRADED", "HEALTHY_MARGIN", "LEAF_DEGRADED",
    "LEAF_DOWN", "NIC_DEAD", "NVLINK_PORT_DOWN", "NVLINK_SWITCH_DEGRADED", "NVLINK_SWITCH_DOWN",
    "POWER_SHELF_DOWN", "SDC", "SLOW_GPU", "SUPPLY_C", "FabricState", "Fault", "FaultKind",
    "FaultsFile", "ThermalReading", "TwinCduReading", "TwinCoolingDriver", "TwinCoolingError",
    "TwinHardware", "UnknownFaultKind", "demo_faults_path", "faults_from", "get_kind",
    "load_faults", "parse_faults",
]
