"""Fault kinds, the faults file, the digital twin that applies them, and a CDU driver on the
twin (lifecycle's CoolingDriver, structurally). All figures simulated."""

from rackscale.faults.cooling import (
    HEALTHY_MARGIN,
    SUPPLY_C,
    TwinCduReading,
    TwinCoolingDriver,
    TwinCoolingError,
)
from rackscale.faults.kinds import FAULT_KINDS, FLAPPING, FaultKind, UnknownFaultKind, get_kind
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
    "DEFAULT_FLAP_PERIOD_S", "DEFAULT_FLAP_SEVERITY", "FAULT_KINDS", "FLAPPING", "HEALTHY_MARGIN",
    "SUPPLY_C",
    "FabricState", "Fault", "FaultKind", "FaultsFile", "ThermalReading", "TwinCduReading",
    "TwinCoolingDriver", "TwinCoolingError", "TwinHardware", "UnknownFaultKind", "demo_faults_path",
    "faults_from", "get_kind", "load_faults", "parse_faults",
]
