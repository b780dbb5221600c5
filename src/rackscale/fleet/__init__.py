"""Fleet model: spec, rack templates, hardware specs with sources, topology and ids."""

from rackscale.fleet.cooling import NOMINAL_FLOW_MARGIN, NOMINAL_INLET_C, CduReading
from rackscale.fleet.hardware import GPUS, NICS, PARTS, GpuSku, NicSku
from rackscale.fleet.ids import id_name, is_within, parent_id, path_below_rack, rack_path
from rackscale.fleet.links import Fabric, HardwareModel, LinkClass, allreduce_busbw
from rackscale.fleet.slurm_topology import (
    HEADER as TOPOLOGY_CONF_HEADER,
)
from rackscale.fleet.slurm_topology import PLUGINS as TOPOLOGY_PLUGINS
from rackscale.fleet.slurm_topology import (
    UnknownPlugin,
    hostlist,
    rack_nodes,
    render_topology_conf,
)
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
from rackscale.fleet.templates import (
    DEFAULT_MAX_BAD_TRAYS,
    TEMPLATES,
    RackTemplate,
    UnknownTemplate,
    get_template,
)
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
    GpuPlace,
    Holder,
    Rack,
    Route,
    Topology,
    UnknownComponent,
    slurm_node_name,
)
from rackscale.fleet.yamlsrc import SpecError, YamlSource, load_yaml, read_yaml, validate

__all__ = [
    "CDU", "COMPUTE_TRAY", "CPU", "DEFAULT_MAX_BAD_TRAYS", "DPU", "GPU", "GPUS", "KINDS",
    "LEAF", "LPM_PER_KW", "NIC", "NICS", "NODE", "NOMINAL_FLOW_MARGIN", "NOMINAL_INLET_C",
    "NVSWITCH", "PARTS", "POWER_SHELF", "RACK", "REGION", "SEEDS", "SPINE", "SWITCH_TRAY",
    "TEMPLATES", "TOPOLOGY_CONF_HEADER", "TOPOLOGY_PLUGINS", "CduReading", "Component",
    "Fabric", "FleetSpec", "GpuPlace", "GpuSku", "HardwareModel", "Holder", "LinkClass",
    "NetworkSpec", "NicSku", "Rack", "RackGroup", "RackTemplate", "RegionSpec", "Route",
    "SpecError", "Topology", "UnknownComponent", "UnknownPlugin", "UnknownTemplate",
    "YamlSource", "allreduce_busbw", "get_template", "hostlist", "id_name", "is_within",
    "load_fleet", "load_yaml", "parent_id", "parse_fleet", "path_below_rack", "rack_nodes",
    "rack_path", "read_yaml", "render_topology_conf", "seed_fleet", "slurm_node_name",
    "synthetic_fleet", "validate",
]


def build_topology(spec: FleetSpec) -> Topology:
    return Topology.build(spec)
