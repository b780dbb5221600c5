"""What the lab builds for a fleet: namespaces, bridges, veths, addresses, rates, cgroups.

Pure data computed from the fleet topology (no system calls), so it is testable without root.
Every GPU rank is a network namespace with two interfaces:
- `so0`, its scale-out NIC: a veth whose other end (`n<g>`) sits on its rail's leaf bridge;
- `nv0`, its "NVLink": a veth whose other end (`v<g>`) sits on its rack's domain bridge.
All bridges and the fabric ends of the veths live in one fabric namespace, so the host's own
network namespace gains nothing. Leaves reach each other only through spine bridges, over veth
uplinks (`u<k>` on the leaf, `w<k>` on the spine), so traffic between leaves crosses a spine.
Rates come from the rack template's SKUs (NIC line rate; NVLink per direction = half of the
GPU's two-way NVLink figure), so the lab's stated peak and the ladder's expectations are the
same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.errors import UserError
from rackscale.fleet import GPUS, NICS, Topology

SO_IF, NV_IF = "so0", "nv0"  # interface names inside every rank namespace
CPU_BASE = 0.5  # CPU cores each rank may use (cgroup quota): GEMM figures stay stable
MAX_RANKS = 64  # a lab on one host: beyond this it is no longer "miniature"


class LabPlanError(UserError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPlan:
    gpu: str  # component id, e.g. lab/r01/c02/gpu1
    number: int  # GPU number in the topology
    netns: str
    nic: str  # component id of its NIC
    leaf: str  # component id of its leaf
    domain: str  # component id of its NVLink domain (the rack)
    so_port: str  # fabric end of the scale-out veth (on the leaf bridge)
    nv_port: str  # fabric end of the NVLink veth (on the domain bridge)
    so_addr: str
    nv_addr: str
    cgroup: str  # cgroup name (relative to each controller's lab directory)


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgePlan:
    id: str  # component id (leaf, spine) or the switch tray id of a domain
    name: str  # bridge name in the fabric namespace
    role: str  # leaf | spine | domain
    uplink: str | None = None  # leaf end of its spine uplink
    spine_end: str | None = None  # spine end of that uplink
    spine: str | None = None  # spine bridge name the uplink joins


@dataclass(frozen=True, slots=True, kw_only=True)
class LabPlan:
    lab_id: str
    fleet: str
    fabric_ns: str
    ranks: tuple[RankPlan, ...]
    bridges: tuple[BridgePlan, ...]
    so_mbit: float  # scale-out NIC rate
    nv_mbit: float  # NVLink veth rate, each direction
    uplink_mbit: float  # leaf-to-spine uplink rate (non-blocking: NIC rate x ranks per leaf)
    cpu_base: float = CPU_BASE
    # every NVLink switch tray -> the domain it joins, from the topology (the injector must
    # not guess it from the switch's id)
    switch_domains: dict[str, str] = field(default_factory=dict)

    def rank(self, gpu: str) -> RankPlan:
        for r in self.ranks:
            if r.gpu == gpu:
                return r
        raise LabPlanError(f"{gpu} is not a GPU rank of lab {self.fleet}")


def _addr(net: int, g: int) -> str:
    return f"10.{net}.{g // 200}.{g % 200 + 1}"


def make_plan(topo: Topology, lab_id: str) -> LabPlan:
    """The lab for `topo`. Every rack must use one template whose SKUs state lab rates."""
    if len(topo.gpu_ids) > MAX_RANKS:
        raise LabPlanError(f"fleet {topo.spec.name} has {len(topo.gpu_ids)} GPUs; the lab "
                           f"builds at most {MAX_RANKS} ranks on one host. Fix: use a fleet "
                           "of a few lab-mini racks")
    templates = {r.template.name for r in topo.racks}
    if len(templates) != 1 or any(r.template.shape != "nvl72" for r in topo.racks):
        raise LabPlanError(f"the lab needs racks of one NVLink-domain template (e.g. lab-mini); "
                           f"fleet {topo.spec.name} uses {', '.join(sorted(templates))}")
    t = topo.racks[0].template
    so_mbit = NICS[t.nic].gbit_s * 1000.0
    nv_mbit = GPUS[t.gpu].nvlink_gbps / 2 * 8000.0
    prefix = f"rsl-{lab_id}"
    ranks = []
    for p in topo.gpu_places():
        g = p.number
        ranks.append(RankPlan(
            gpu=p.gpu, number=g, netns=f"{prefix}-g{g}", nic=p.nic, leaf=p.leaf,
            domain=p.domain, so_port=f"n{g}", nv_port=f"v{g}", so_addr=_addr(77, g),
            nv_addr=_addr(78, g), cgroup=f"g{g}"))
    bridges: list[BridgePlan] = []
    per_leaf = max(sum(1 for r in ranks if r.leaf == leaf) for leaf in topo.leaves)
    for region_spines in topo.spines:
        for k, spine in enumerate(region_spines):
            bridges.append(BridgePlan(id=spine, name=f"S{len(bridges)}", role="spine"))
            del k
    spine_names = {b.id: b.name for b in bridges}
    for k, leaf in enumerate(topo.leaves):
        region = topo.regions[topo.leaf_region[k]]
        # one uplink per leaf, to its region's first spine (the lab has one spine per region)
        spine = topo.spines[topo.regions.index(region)][0]
        bridges.append(BridgePlan(id=leaf, name=f"L{k}", role="leaf", uplink=f"u{k}",
                                  spine_end=f"w{k}", spine=spine_names[spine]))
    switch_domains: dict[str, str] = {}
    for d, dom in enumerate(topo.domains):
        bridges.append(BridgePlan(id=topo.domain_switches[d][0], name=f"D{d}", role="domain"))
        switch_domains.update(dict.fromkeys(topo.domain_switches[d], dom))
    return LabPlan(lab_id=lab_id, fleet=topo.spec.name, fabric_ns=f"{prefix}-fab",
                   ranks=tuple(ranks), bridges=tuple(bridges), so_mbit=so_mbit,
                   nv_mbit=nv_mbit, uplink_mbit=so_mbit * per_leaf,
                   switch_domains=switch_domains)
