"""The fleet's topology: every component with its id, and the queries over it.

Component ids are paths (docs/architecture.md): `us-east`, `us-east/r03`, `us-east/r03/c07`,
`us-east/r03/c07/gpu2`, `us-east/r03/s04`, `us-east/r03/cdu`, `us-east/r03/ps1`,
`us-east/leaf-rail2-0`, `us-east/spine-3`.

Components are stored column-wise in depth-first order (a region, then its racks with their
trays and parts, then its leaves and spines), so every component's subtree is one contiguous
run of indexes. Each rack template's layout is computed once and stamped out per rack
(`fleet/layout.py`), so a ~128k-GPU fleet (~450k components) builds in about a second.
GPU-level facts the digital twin and the simulator need (rack, tray, rail, leaf, NVLink domain
of every GPU) are numpy arrays indexed by GPU number. The values the queries return
(`Component`, `Rack`, `Holder`, `Route`) are in `fleet/records.py`.

Scale-out network: rail k joins `nic k` of every tray. Each region has, per rail, one leaf per
`racks_per_leaf` racks, and `spines_per_region` spines that join every leaf of the region.
Traffic between regions crosses both regions' spines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rackscale.errors import UserError
from rackscale.fleet.hardware import GPUS
from rackscale.fleet.kinds import (
    CDU,
    COMPUTE_TRAY,
    CPU,
    DPU,
    FABRIC_KINDS,
    GPU,
    IN_TRAY_KINDS,
    KINDS,
    LEAF,
    NIC,
    NODE,
    NVSWITCH,
    POWER_SHELF,
    RACK,
    RACK_LEVEL_KINDS,
    REGION,
    SPINE,
    SWITCH_TRAY,
    TRAY_KINDS,
)
from rackscale.fleet.layout import RackLayout
from rackscale.fleet.records import (
    LPM_PER_KW,
    Component,
    GpuPlace,
    Holder,
    Level,
    Rack,
    Route,
    UnknownComponent,
    slurm_node_name,
)
from rackscale.fleet.spec import FleetSpec, RackGroup, RegionSpec
from rackscale.fleet.templates import TEMPLATES

# The kinds are re-exported: `rackscale.fleet` has long taken them from here.
__all__ = [
    "CDU", "COMPUTE_TRAY", "CPU", "DPU", "GPU", "KINDS", "LEAF", "LPM_PER_KW", "NIC", "NODE",
    "NVSWITCH", "POWER_SHELF", "RACK", "REGION", "SPINE", "SWITCH_TRAY", "Component", "GpuPlace",
    "Holder",
    "Rack", "Route", "Topology", "UnknownComponent", "slurm_node_name",
]

@dataclass(slots=True)
class _GpuColumns:
    """Per-GPU columns while the topology is built: one array per rack, joined once done."""

    comp: list[np.ndarray] = field(default_factory=list)
    region: list[np.ndarray] = field(default_factory=list)
    rack: list[np.ndarray] = field(default_factory=list)
    tray: list[np.ndarray] = field(default_factory=list)
    slot: list[np.ndarray] = field(default_factory=list)
    leaf: list[np.ndarray] = field(default_factory=list)
    domain: list[np.ndarray] = field(default_factory=list)
    nic: list[np.ndarray] = field(default_factory=list)
    sku: list[str] = field(default_factory=list)
    count: int = 0

    @staticmethod
    def join(chunks: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(chunks).astype(dtype) if chunks else np.empty(0, dtype=dtype)


@dataclass(frozen=True, slots=True)
class _RegionPlace:
    """Where a region's racks go: its number, name, first component and leaf numbering."""

    r_no: int
    name: str
    start: int
    leaf_base: int
    leaf_groups: int


class Topology:
    """All components of a fleet and the queries over them. Build with `Topology.build(spec)`."""

    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self.ids: list[str] = []
        self.kinds: list[str] = []
        self.parents: list[int] = []
        self.skus: list[str | None] = []
        self.region_of: list[int] = []  # region number of every component
        self.rack_of: list[int] = []  # rack number of every component, -1 outside racks
        self.regions: list[str] = []
        self.region_ranges: list[tuple[int, int]] = []
        self.racks: list[Rack] = []
        self.leaves: list[str] = []
        self.spines: list[list[str]] = []  # per region
        self.domains: list[str] = []  # NVLink domain ids (rack for nvl72, node for hgx)
        self.domain_switches: list[tuple[str, ...]] = []
        self._index: dict[str, int] | None = None  # id -> position, built on first use
        self.rack_by_id: dict[str, Rack] = {}  # the racks by id (1,778 at 128k GPUs)
        # GPU arrays (filled by build)
        self.gpu_ids: list[str] = []
        self.gpu_comp = np.empty(0, dtype=np.int64)
        self.gpu_region = np.empty(0, dtype=np.int32)
        self.gpu_rack = np.empty(0, dtype=np.int32)
        self.gpu_tray = np.empty(0, dtype=np.int64)  # component index of the GPU's tray/node
        self.gpu_slot = np.empty(0, dtype=np.int16)  # k in gpuK; also the rail of nicK
        self.gpu_leaf = np.empty(0, dtype=np.int32)
        self.gpu_domain = np.empty(0, dtype=np.int32)
        self.gpu_nic = np.empty(0, dtype=np.int64)  # component index of the GPU's NIC
        self.gpu_sku: list[str] = []
        self._leaf_index: dict[str, int] = {}
        self.leaf_region: list[int] = []
        self.leaf_rail: list[int] = []

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, spec: FleetSpec) -> Topology:
        topo = cls(spec)
        topo._build()
        return topo

    def _add(self, cid: str, kind: str, parent: int, sku: str | None, region: int,
             rack: int) -> int:
        i = len(self.ids)
        self.ids.append(cid)
        self.kinds.append(kind)
        self.parents.append(parent)
        self.skus.append(sku)
        self.region_of.append(region)
        self.rack_of.append(rack)
        return i

    def _build(self) -> None:
        cols = _GpuColumns()
        layouts: dict[tuple[str, int], RackLayout] = {}
        for r_no, region in enumerate(self.spec.regions):
            self._build_region(r_no, region, cols, layouts)
        self._check_unique(layouts)
        join = _GpuColumns.join
        self.gpu_comp = join(cols.comp, np.int64)
        ids = self.ids
        self.gpu_ids = [ids[i] for i in self.gpu_comp.tolist()]
        self.gpu_region = join(cols.region, np.int32)
        self.gpu_rack = join(cols.rack, np.int32)
        self.gpu_tray = join(cols.tray, np.int64)
        self.gpu_slot = join(cols.slot, np.int16)
        self.gpu_leaf = join(cols.leaf, np.int32)
        self.gpu_domain = join(cols.domain, np.int32)
        self.gpu_nic = join(cols.nic, np.int64)
        self.gpu_sku = cols.sku

    def _check_unique(self, layouts: dict[tuple[str, int], RackLayout]) -> None:
        """The backstop that keeps a gap in the spec's name rules from becoming one inventory
        row silently overwriting another. Names hold no `/`, so an id is a region, a name
        under it (rack, leaf, spine) or a rack's layout suffix under a rack: ids are unique
        when those three are, checked over the racks and layouts, not the 450k parts."""
        second = [self.ids[r.first] for r in self.racks] + self.leaves + [
            s for spines in self.spines for s in spines]
        dup = [cid for cid, n in Counter([*self.regions, *second]).items() if n > 1]
        dup += [f"<rack>/{sfx}" for lay in layouts.values()
                for sfx, n in Counter(lay.suffixes).items() if n > 1]
        if dup:
            raise UserError(f"fleet {self.spec.name}: {len(dup)} component ids are given to two "
                            f"parts (e.g. {', '.join(dup[:3])}); rename the racks so that no "
                            "rack name equals a switch or part name")

    @property
    def index(self) -> dict[str, int]:
        """Component id -> its position. Built on first use: hashing 450k ids at 128k GPUs
        costs 0.1 s, and a command that looks no id up (a quiet lifecycle pass) skips it."""
        if self._index is None:
            self._index = dict(zip(self.ids, range(len(self.ids)), strict=True))
        return self._index

    def _build_region(self, r_no: int, region: RegionSpec, cols: _GpuColumns,
                      layouts: dict[tuple[str, int], RackLayout]) -> None:
        net = self.spec.network
        rstart = self._add(region.name, REGION, -1, None, r_no, -1)
        self.regions.append(region.name)
        rack_list = region.rack_names()
        rails = max(TEMPLATES[g.template].nics_per_tray for _, g in rack_list)
        n_groups = (len(rack_list) + net.racks_per_leaf - 1) // net.racks_per_leaf
        # Leaf numbers are assigned before the racks so GPUs can point at them.
        leaf_base = len(self.leaves)
        for rail in range(rails):
            for g in range(n_groups):
                self._leaf_index[f"{region.name}/leaf-rail{rail}-{g}"] = len(self.leaves)
                self.leaves.append(f"{region.name}/leaf-rail{rail}-{g}")
                self.leaf_region.append(r_no)
                self.leaf_rail.append(rail)
        where = _RegionPlace(r_no=r_no, name=region.name, start=rstart, leaf_base=leaf_base,
                             leaf_groups=n_groups)
        for local, (name, group) in enumerate(rack_list):
            t = TEMPLATES[group.template]
            trays = group.nodes_per_rack or t.trays
            key = (t.name, trays)
            if key not in layouts:
                layouts[key] = RackLayout.of(t, trays)
            self._build_rack(where, local, name, group, layouts[key], cols)
        for leaf in self.leaves[leaf_base:]:
            self._add(leaf, LEAF, rstart, None, r_no, -1)
        spines = [f"{region.name}/spine-{j}" for j in range(net.spines_per_region)]
        self.spines.append(spines)
        for s in spines:
            self._add(s, SPINE, rstart, None, r_no, -1)
        self.region_ranges.append((rstart, len(self.ids)))

    def _build_rack(self, where: _RegionPlace, local: int, name: str, group: RackGroup,
                    layout: RackLayout, cols: _GpuColumns) -> None:
        """One rack's components (its template's layout stamped out), NVLink domains, GPUs."""
        t = TEMPLATES[group.template]
        trays = group.nodes_per_rack or t.trays
        r_no = where.r_no
        rack_no = len(self.racks)
        rack_id = f"{where.name}/{name}"
        first = self._add(rack_id, RACK, where.start, t.name, r_no, rack_no)
        base = first + 1  # a layout parent of -1 (the rack) lands on `first`
        gpu_first = cols.count
        pre = rack_id + "/"
        n = len(layout.suffixes)
        self.ids.extend(map(pre.__add__, layout.suffixes))
        self.kinds.extend(layout.kinds)
        self.parents.extend((layout.parents + base).tolist())
        self.skus.extend(layout.skus)
        self.region_of.extend([r_no] * n)
        self.rack_of.extend([rack_no] * n)
        dom_first = len(self.domains)
        if t.domain_is_rack:
            self.domains.append(rack_id)
            self.domain_switches.append(tuple(map(pre.__add__, layout.rack_switches)))
        for node, switches in layout.node_domains:
            self.domains.append(pre + node)
            self.domain_switches.append(tuple(map(pre.__add__, switches)))
        gpus = len(layout.gpu_pos)
        leaf_group = local // self.spec.network.racks_per_leaf
        cols.comp.append(layout.gpu_pos + base)
        cols.region.append(np.full(gpus, r_no))
        cols.rack.append(np.full(gpus, rack_no))
        cols.tray.append(layout.gpu_tray + base)
        cols.slot.append(layout.gpu_slot)
        cols.leaf.append(where.leaf_base + layout.gpu_slot * where.leaf_groups + leaf_group)
        cols.domain.append(np.full(gpus, dom_first) if t.domain_is_rack
                           else dom_first + layout.gpu_node)
        cols.nic.append(layout.gpu_nic + base)
        cols.sku.extend([t.gpu] * gpus)
        cols.count += gpus
        self.racks.append(Rack(
            id=rack_id, name=name, region=where.name, template=t, index=rack_no,
            local_index=local, trays=trays, first=first, end=len(self.ids),
            gpu_first=gpu_first, gpu_end=cols.count,
        ))
        self.rack_by_id[rack_id] = self.racks[-1]

    # ------------------------------------------------------------------ lookups
    def __len__(self) -> int:
        return len(self.ids)

    def idx(self, cid: str) -> int:
        try:
            return self.index[cid]
        except KeyError:
            raise UnknownComponent(self._unknown_message(cid)) from None

    def _unknown_message(self, cid: str) -> str:
        parent = cid.rsplit("/", 1)[0] if "/" in cid else ""
        hint = ""
        if parent in self.index:
            kids = [c.id for c in self.children(parent)][:8]
            hint = f"; {parent} holds: {', '.join(kids)}{' ...' if len(kids) == 8 else ''}"
        else:
            hint = f"; regions are: {', '.join(self.regions)}"
        return f"unknown component id {cid!r}{hint}"

    def component(self, cid: str | int) -> Component:
        i = self.idx(cid) if isinstance(cid, str) else cid
        p = self.parents[i]
        r = self.rack_of[i]
        return Component(
            id=self.ids[i], kind=self.kinds[i], parent=self.ids[p] if p >= 0 else None,
            region=self.regions[self.region_of[i]], rack=self.racks[r].id if r >= 0 else None,
            sku=self.skus[i], attributes=self.attributes(i),
        )

    def attributes(self, i: int) -> dict[str, Any]:
        kind = self.kinds[i]
        cid = self.ids[i]
        if kind == RACK:
            rack = self.racks[self.rack_of[i]]
            return {"template": rack.template.name, "trays": rack.trays,
                    "power_kw": rack.power_kw}
        if kind == CDU:
            rack = self.racks[self.rack_of[i]]
            return {"required_flow_lpm": round(rack.required_flow_lpm, 1)}
        if kind in (GPU, NIC):
            k = int(cid.rsplit(kind, 1)[1])
            return {"slot": k, "rail": k} if kind == NIC else {"slot": k}
        if kind == LEAF:
            n = self._leaf_index[cid]
            return {"rail": self.leaf_rail[n]}
        return {}

    def subtree_range(self, cid: str) -> tuple[int, int]:
        i = self.idx(cid)
        prefix = cid + "/"
        j = i + 1
        kind = self.kinds[i]
        if kind == REGION:
            return self.region_ranges[self.region_of[i]]
        if kind == RACK:
            rack = self.racks[self.rack_of[i]]
            return rack.first, rack.end
        ids = self.ids
        while j < len(ids) and ids[j].startswith(prefix):
            j += 1
        return i, j

    def children(self, cid: str) -> Iterator[Component]:
        i = self.idx(cid)
        lo, hi = self.subtree_range(cid)
        for j in range(lo, hi):
            if self.parents[j] == i:
                yield self.component(j)

    def components(self, kind: str | None = None, scope: str | None = None) -> Iterator[Component]:
        """Components of one kind (or all) inside a scope (a region, rack or tray id)."""
        if kind is not None and kind not in KINDS:
            raise UserError(f"unknown component kind {kind!r}; valid kinds: {', '.join(KINDS)}")
        lo, hi = self.subtree_range(scope) if scope else (0, len(self.ids))
        kinds = self.kinds
        for j in range(lo, hi):
            if kind is None or kinds[j] == kind:
                yield self.component(j)

    def count(self, kind: str, scope: str | None = None) -> int:
        lo, hi = self.subtree_range(scope) if scope else (0, len(self.ids))
        return sum(1 for j in range(lo, hi) if self.kinds[j] == kind)

    def rack(self, cid: str) -> Rack:
        """The rack `cid` is (or is inside)."""
        if (rack := self.rack_by_id.get(cid)) is not None:
            return rack
        r = self.rack_of[self.idx(cid)]
        if r < 0:
            raise UserError(f"{cid} is not inside a rack")
        return self.racks[r]

    def tray_index(self, i: int) -> int:
        """Component index of the compute tray or node holding component `i` (itself for a
        tray), or -1 when no tray holds it."""
        kind = self.kinds[i]
        if kind in TRAY_KINDS:
            return i
        if kind in IN_TRAY_KINDS:
            return self.parents[i]
        return -1

    def holder(self, cid: str) -> Holder:
        i = self.idx(cid)
        kind = self.kinds[i]
        r = self.rack_of[i]
        rack = self.racks[r] if r >= 0 else None
        t = self.tray_index(i)
        tray = self.ids[t] if t >= 0 else None
        level: Level
        if tray is not None:
            level = "tray"
        elif kind in RACK_LEVEL_KINDS:
            level = "rack"
        elif kind in FABRIC_KINDS:
            level = "fabric"
        else:
            level = "region"
        domain = None
        if rack is not None:
            domain = rack.id if rack.template.domain_is_rack else tray
        return Holder(component=cid, kind=kind, level=level,
                      region=self.regions[self.region_of[i]],
                      rack=rack.id if rack else None, tray=tray, domain=domain)

    def rack_id(self, cid: str) -> str | None:
        """The rack holding `cid` (a rack is its own), None for a region or fabric part."""
        r = self.rack_of[self.idx(cid)]
        return self.racks[r].id if r >= 0 else None

    def tray_id(self, cid: str) -> str | None:
        """The compute tray or HGX node holding `cid` (a tray is its own), else None."""
        t = self.tray_index(self.idx(cid))
        return self.ids[t] if t >= 0 else None

    def slurm_node_of(self, cid: str) -> str:
        """The Slurm node of a tray or of a part in one (`slurm_node_name` of its tray)."""
        tray = self.tray_id(cid)
        if tray is None:
            raise UserError(f"{cid} is a {self.kinds[self.idx(cid)]}: only a compute tray or "
                            "HGX node (and the parts in it) is a Slurm node")
        return slurm_node_name(tray)

    def trays_by_slurm_node(self) -> dict[str, str]:
        """Slurm node name -> its tray id, for every compute tray and HGX node (the inverse
        of `slurm_node_of`)."""
        ids = self.ids
        return {slurm_node_name(ids[t]): ids[t] for t in dict.fromkeys(self.gpu_tray.tolist())}

    def gpu_number(self, cid: str) -> int:
        i = self.idx(cid)
        if self.kinds[i] != GPU:
            raise UserError(f"{cid} is a {self.kinds[i]}, not a GPU")
        rack = self.racks[self.rack_of[i]]
        lo = rack.gpu_first
        return lo + int(np.searchsorted(self.gpu_comp[lo:rack.gpu_end], i))

    def gpu_place(self, gpu: str | int) -> GpuPlace:
        """Where GPU `gpu` (its id, or its number in the GPU arrays) sits: its tray or node,
        NVLink domain, rack, region, NIC and leaf."""
        g = self.gpu_number(gpu) if isinstance(gpu, str) else gpu
        if not 0 <= g < len(self.gpu_ids):
            raise UserError(f"GPU number {g} is outside fleet {self.spec.name} "
                            f"(0..{len(self.gpu_ids) - 1})")
        return GpuPlace(
            gpu=self.gpu_ids[g], number=g, slot=int(self.gpu_slot[g]),
            tray=self.ids[int(self.gpu_tray[g])], domain=self.domains[int(self.gpu_domain[g])],
            rack=self.racks[int(self.gpu_rack[g])].id,
            region=self.regions[int(self.gpu_region[g])],
            nic=self.ids[int(self.gpu_nic[g])], leaf=self.leaves[int(self.gpu_leaf[g])])

    def gpu_places(self) -> Iterator[GpuPlace]:
        """`gpu_place` of every GPU, in GPU-number order."""
        for g in range(len(self.gpu_ids)):
            yield self.gpu_place(g)

    def tray_of_gpus(self) -> dict[str, str]:
        """GPU id -> its compute tray or node (an NVL72 tray holds 4 GPUs, an HGX node 8)."""
        ids = self.ids
        return dict(zip(self.gpu_ids, (ids[t] for t in self.gpu_tray.tolist()), strict=True))

    def domain_of_gpus(self) -> dict[str, str]:
        """GPU id -> its NVLink domain (the rack on NVL72, the node on HGX)."""
        doms = self.domains
        return dict(zip(self.gpu_ids, (doms[d] for d in self.gpu_domain.tolist()), strict=True))

    def tray_gpus(self, tray: str) -> list[str]:
        """The GPU ids of a compute tray or HGX node, in slot order (gpu0 first)."""
        i = self.idx(tray)
        if self.kinds[i] not in TRAY_KINDS:
            raise UserError(f"{tray} is a {self.kinds[i]}, not a compute tray or node")
        rack = self.racks[self.rack_of[i]]
        gpus = np.arange(rack.gpu_first, rack.gpu_end)
        return [self.gpu_ids[g] for g in gpus[self.gpu_tray[gpus] == i].tolist()]

    # ------------------------------------------------------------------ paths
    def path(self, a: str, b: str) -> Route:
        ga, gb = self.gpu_number(a), self.gpu_number(b)
        if ga == gb:
            return Route(a, b, "same", ((a,),))
        if self.gpu_domain[ga] == self.gpu_domain[gb]:
            return Route(a, b, "nvlink", ((a,), self.domain_switches[self.gpu_domain[ga]], (b,)))
        nic_a, nic_b = self.ids[self.gpu_nic[ga]], self.ids[self.gpu_nic[gb]]
        leaf_a, leaf_b = self.leaves[self.gpu_leaf[ga]], self.leaves[self.gpu_leaf[gb]]
        hops: list[tuple[str, ...]] = [(a,), (nic_a,), (leaf_a,)]
        if leaf_a != leaf_b:
            ra, rb = int(self.gpu_region[ga]), int(self.gpu_region[gb])
            hops.append(tuple(self.spines[ra]))
            if ra != rb:
                hops.append(tuple(self.spines[rb]))
            hops.append((leaf_b,))
        hops += [(nic_b,), (b,)]
        return Route(a, b, "scaleout", tuple(hops))

    # ------------------------------------------------------------------ blast radius
    def affected_gpus(self, cid: str) -> np.ndarray:
        """GPU numbers whose work a fault of component `cid` touches (its blast radius)."""
        i = self.idx(cid)
        kind = self.kinds[i]
        if kind == GPU:
            return np.asarray([self.gpu_number(cid)])
        if kind == NIC:
            return np.flatnonzero(self.gpu_nic == i)
        if kind == LEAF:
            return np.flatnonzero(self.gpu_leaf == self._leaf_index[cid])
        if kind in (REGION, SPINE):
            return np.flatnonzero(self.gpu_region == self.region_of[i])
        rack = self.racks[self.rack_of[i]]
        rack_gpus = np.arange(rack.gpu_first, rack.gpu_end)
        if kind in (RACK, CDU, POWER_SHELF, SWITCH_TRAY):
            # Switch trays: every GPU of the NVL72 domain stripes its NVLink over all 9 trays.
            # Power shelves feed the rack's shared bus bar, so every tray depends on them.
            return rack_gpus
        tray = i if kind in (COMPUTE_TRAY, NODE) else self.parents[i]
        tray_gpus: np.ndarray = rack_gpus[self.gpu_tray[rack_gpus] == tray]
        if kind == CPU:
            # Each CPU hosts an equal share of its tray's GPUs (Vera/Grace: 2 GPUs each).
            k = int(cid.rsplit("cpu", 1)[1])
            per = len(tray_gpus) // rack.template.cpus_per_tray
            return tray_gpus[k * per:(k + 1) * per]
        return tray_gpus  # tray, node, DPU, NVSwitch chip

    def affected_gpu_ids(self, cid: str) -> list[str]:
        return [self.gpu_ids[g] for g in self.affected_gpus(cid)]

    # ------------------------------------------------------------------ summary
    def summary(self) -> dict[str, Any]:
        per_region: dict[str, dict[str, int]] = {}
        for r_no, name in enumerate(self.regions):
            lo, hi = self.region_ranges[r_no]
            per_region[name] = dict(Counter(self.kinds[lo:hi]))
        totals = dict(Counter(self.kinds))
        peak = sum(GPUS[s].bf16_dense_tflops for s in self.gpu_sku) / 1000.0
        unverified = sorted({s for s in set(self.gpu_sku) if not GPUS[s].verified})
        return {
            "fleet": self.spec.name,
            "regions": len(self.regions),
            "racks": len(self.racks),
            "headline_gpus": len(self.gpu_ids),
            "peak_bf16_pflops": round(peak, 1),
            "peak_is_estimate_for": unverified,
            "totals": totals,
            "per_region": per_region,
            "per_rack_template": dict(Counter(r.template.name for r in self.racks)),
        }
