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
from rackscale.faults.twin import (
    MIN_CLOCK,
    THROTTLE_FLOW,
    FabricState,
    ThermalReading,
    TwinHardware,
    clock_fraction,
)

__all__ = [
    "BAD_CABLE", "COOLANT_FLOW_LOW", "DEFAULT_FLAP_PERIOD_S", "DEFAULT_FLAP_SEVERITY",
    "FAULT_KINDS", "FLAPPING", "GPU_DEAD", "HBM_DEGRADED", "HEALTHY_MARGIN", "LEAF_DEGRADED",
    "LEAF_DOWN", "MIN_CLOCK", "NIC_DEAD", "NVLINK_PORT_DOWN", "NVLINK_SWITCH_DEGRADED",
    "NVLINK_SWITCH_DOWN", "POWER_SHELF_DOWN", "SDC", "SLOW_GPU", "SUPPLY_C", "THROTTLE_FLOW",
    "FabricState", "Fault", "FaultKind", "FaultsFile", "ThermalReading", "TwinCduReading",
    "TwinCoolingDriver", "TwinCoolingError", "TwinHardware", "UnknownFaultKind", "clock_fraction",
    "demo_faults_path", "faults_from", "get_kind", "load_faults", "parse_faults",
]
