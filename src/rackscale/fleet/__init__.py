"""Fleet model: spec, rack templates, hardware specs with sources, topology and ids."""

from rackscale.fleet.hardware import GPUS, NICS, PARTS, GpuSku, NicSku
from rackscale.fleet.links import Fabric, HardwareModel, LinkClass, allreduce_busbw
from rackscale.fleet.spec import (
    SEEDS,
    FleetSpec,
    NetworkSpec,
    RackGroup,
    RegionSpec,
    load_fleet,
    parse_fleet,
    seed_fleet,
    synthetic_fleet,
)
from rackscale.fleet.templates import TEMPLATES, RackTemplate, get_template
from rackscale.fleet.topology import (
    CDU,
    COMPUTE_TRAY,
    CPU,
    DPU,
    GPU,
    KINDS,
    LEAF,
    LPM_PER_KW,
    NIC,
    NODE,
    NVSWITCH,
    POWER_SHELF,
    RACK,
    REGION,
    SPINE,
    SWITCH_TRAY,
    Component,
    Path,
    Rack,
    Topology,
    UnknownComponent,
)
from rackscale.fleet.yamlsrc import SpecError, YamlSource, load_yaml, read_yaml, validate

__all__ = [
    "CDU", "COMPUTE_TRAY", "CPU", "DPU", "GPU", "GPUS", "KINDS", "LEAF", "LPM_PER_KW", "NIC",
    "NICS", "NODE", "NVSWITCH", "PARTS", "POWER_SHELF", "RACK", "REGION", "SEEDS", "SPINE",
    "SWITCH_TRAY", "TEMPLATES", "Component", "Fabric", "FleetSpec", "GpuSku", "HardwareModel",
    "LinkClass", "NetworkSpec", "NicSku", "Path", "Rack", "RackGroup", "RackTemplate",
    "RegionSpec", "SpecError", "Topology", "UnknownComponent", "YamlSource", "allreduce_busbw",
    "get_template", "load_fleet", "load_yaml", "parse_fleet", "read_yaml", "seed_fleet",
    "synthetic_fleet", "validate",
]


def build_topology(spec: FleetSpec) -> Topology:
    return Topology.build(spec)
