"""What the topology hands out: a component, a rack, what holds a part, the route between
two GPUs, as frozen values. The topology (`fleet/topology.py`) builds and queries; these are
the answers, importable without it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rackscale.errors import UserError
from rackscale.fleet.templates import RackTemplate

# Water at a 10 K rise carries 1 kW per ~1.43 L/min (physics; docs/figures.md, Cooling).
LPM_PER_KW = 1.43


class UnknownComponent(UserError):
    """A component id the fleet does not have (the message names what its parent holds)."""


def slurm_node_name(tray_id: str) -> str:
    """The Slurm node of a tray (HGX: node): its component id with "/" as "-" (Slurm node
    names cannot hold "/"), e.g. us-east/r03/c07 -> us-east-r03-c07."""
    return tray_id.replace("/", "-")


@dataclass(frozen=True, slots=True)
class Component:
    id: str
    kind: str
    parent: str | None
    region: str
    rack: str | None
    sku: str | None
    attributes: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rack:
    id: str
    name: str
    region: str
    template: RackTemplate
    index: int  # fleet-wide rack number
    local_index: int  # position inside its region
    trays: int  # compute trays (nvl72) or nodes (hgx)
    first: int  # component index range [first, end) of the rack's subtree
    end: int
    gpu_first: int  # GPU number range [gpu_first, gpu_end)
    gpu_end: int

    @property
    def gpus(self) -> int:
        return self.gpu_end - self.gpu_first

    @property
    def power_kw(self) -> float:
        if self.template.nodes_per_rack_varies:  # nameplate per node: scale to the nodes held
            return self.template.rack_power_kw / self.template.trays * self.trays
        return self.template.rack_power_kw

    @property
    def required_flow_lpm(self) -> float:
        return self.power_kw * LPM_PER_KW


Level = Literal["tray", "rack", "fabric", "region"]


@dataclass(frozen=True, slots=True)
class Holder:
    """What holds a part: the one answer to "which tray, rack or domain is this in".

    `level` says what a fault of the part takes out: its `tray` (a part on a compute tray or
    HGX node, or the tray itself), its whole `rack` (switch trays, CDU, power shelves, the
    rack), the shared `fabric` (leaves, spines: no rack holds them), or a `region`.
    """

    component: str
    kind: str
    level: Level
    region: str
    rack: str | None  # None outside racks
    tray: str | None  # the compute tray or node, for tray-level parts only
    domain: str | None  # the NVLink domain it belongs to; None for fabric, region, HGX racks


@dataclass(frozen=True, slots=True)
class GpuPlace:
    """Where one GPU sits, by its rack template's own numbers (an NVL72 compute tray holds 4
    GPUs, an HGX node 8): the one answer to "which tray, domain and rack hold this GPU"."""

    gpu: str
    number: int  # the GPU's number in the topology's GPU arrays
    slot: int  # k in gpuK: its place on the tray, and the rail of its NIC
    tray: str  # the compute tray (NVL72) or node (HGX) holding it; its Slurm node
    domain: str  # its NVLink domain: the rack (NVL72) or the node (HGX)
    rack: str
    region: str
    nic: str  # the scale-out NIC serving it
    leaf: str  # the leaf switch that NIC joins


@dataclass(frozen=True, slots=True)
class Route:
    """The route between two GPUs. Each hop is a tuple of the parts that carry it in parallel
    (all 9 NVLink switch trays of a domain; every spine, by ECMP)."""

    a: str
    b: str
    fabric: Literal["same", "nvlink", "scaleout"]
    hops: tuple[tuple[str, ...], ...]

    def __str__(self) -> str:
        def hop(h: tuple[str, ...]) -> str:
            return h[0] if len(h) == 1 else f"[{h[0]} .. {h[-1]} ({len(h)} parallel)]"

        return " -> ".join(hop(h) for h in self.hops)
