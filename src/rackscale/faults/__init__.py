"""Fault kinds, the faults file, and the digital twin that applies them (simulated figures)."""

from rackscale.faults.kinds import FAULT_KINDS, FLAPPING, FaultKind, UnknownFaultKind, get_kind
from rackscale.faults.spec import (
    DEFAULT_FLAP_PERIOD_S,
    Fault,
    FaultsFile,
    demo_faults_path,
    faults_from,
    load_faults,
    parse_faults,
)
from rackscale.faults.twin import FabricState, ThermalReading, TwinHardware

__all__ = [
    "DEFAULT_FLAP_PERIOD_S", "FAULT_KINDS", "FLAPPING", "FabricState", "Fault", "FaultKind",
    "FaultsFile", "ThermalReading", "TwinHardware", "UnknownFaultKind", "demo_faults_path",
    "faults_from", "get_kind", "load_faults", "parse_faults",
]
