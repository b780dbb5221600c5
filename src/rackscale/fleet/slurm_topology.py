"""The fleet's shape as Slurm's topology.conf, so Slurm keeps a job inside one NVLink domain.

Two plugins read the file (topology.conf(5)):
- `tree` (Slurm 22.05 and later): one leaf switch per NVLink domain (an NVL72 rack with its 18
  compute trays; an HGX rack with its nodes), above them one switch per scale-out leaf group
  (the racks whose trays share a leaf on every rail), one spine switch per region and, for a
  fleet of several regions, one switch over the spines. `--switches=1` then keeps a job under
  one leaf switch: inside one NVLink domain.
- `block` (Slurm 23.11 and later): one block per NVLink domain, and `BlockSizes` from the
  smallest block's node count doubling up to the fleet (each further size must be a power of
  two times the one before, and every block must hold at least the first).

Node names are the fleet's Slurm node names (`slurm_node_name`: the tray id with `/` as `-`).
The text is a function of the fleet alone (no time stamp), so a rewrite that changes nothing
leaves the file as it was. Racks named in `leave_out` (retired ones) are left out; a drained
tray is still in the topology (a drain is a node state, not a change of the network).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Literal

from rackscale.errors import UserError
from rackscale.fleet.kinds import TRAY_KINDS
from rackscale.fleet.records import Rack, slurm_node_name
from rackscale.fleet.topology import Topology

Plugin = Literal["tree", "block"]
PLUGINS: tuple[Plugin, ...] = ("tree", "block")
# The first line of every file rackscale writes: the lifecycle overwrites only such a file.
HEADER = "# rackscale topology.conf"
_NUMBERED = re.compile(r"^(.*?)(\d+)$")


class UnknownPlugin(UserError):
    pass


def rack_nodes(topo: Topology, rack: Rack) -> list[str]:
    """The Slurm node names of a rack's compute trays (HGX: nodes), in tray order."""
    kinds, ids = topo.kinds, topo.ids
    return [slurm_node_name(ids[j]) for j in range(rack.first, rack.end)
            if kinds[j] in TRAY_KINDS]


def hostlist(names: Iterable[str]) -> str:
    """Names as a Slurm hostlist expression: runs of one prefix with numbers of one width
    become `prefix[01-18]`; anything else stays as it is, comma-separated, in the given order
    of first appearance."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int] | str] = []
    for name in names:
        m = _NUMBERED.match(name)
        if m is None:
            order.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    out = []
    for item in order:
        if isinstance(item, str):
            out.append(item)
            continue
        prefix, width = item
        nums = sorted(set(groups[item]))
        if len(nums) == 1:
            out.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        out.append(f"{prefix}[{','.join(_runs(nums, width))}]")
    return ",".join(out)


def _runs(nums: list[int], width: int) -> list[str]:
    runs: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        runs.append(f"{start:0{width}d}" if start == prev
                    else f"{start:0{width}d}-{prev:0{width}d}")
        if n is not None:
            start = prev = n
    return runs


def render_topology_conf(topo: Topology, plugin: str = "tree", *,
                         leave_out: Collection[str] = ()) -> str:
    """topology.conf for the fleet (see the module's docstring); `leave_out`: rack ids."""
    if plugin not in PLUGINS:
        raise UnknownPlugin(f"unknown topology plugin {plugin!r}; valid plugins: "
                            f"{', '.join(PLUGINS)}")
    racks = [r for r in topo.racks if r.id not in leave_out]
    lines = [f"{HEADER} for fleet {topo.spec.name} (TopologyPlugin=topology/{plugin}).",
             "# Written from the fleet model; regenerate it rather than edit it: "
             "rackscale fleet topology-conf"]
    if not racks:
        return "\n".join([*lines, "# no racks in the fleet"]) + "\n"
    body = _tree(topo, racks) if plugin == "tree" else _block(topo, racks)
    return "\n".join([*lines, *body]) + "\n"


def _block(topo: Topology, racks: list[Rack]) -> list[str]:
    lines = []
    sizes = []
    for rack in racks:
        nodes = rack_nodes(topo, rack)
        sizes.append(len(nodes))
        lines.append(f"BlockName={slurm_node_name(rack.id)} Nodes={hostlist(nodes)}")
    base = min(sizes)
    levels = [base]
    # Aggregates pair neighbouring blocks: 2, 4, 8 ... blocks, as many as the fleet has.
    while levels[-1] * 2 <= base * len(racks):
        levels.append(levels[-1] * 2)
    lines.append(f"BlockSizes={','.join(map(str, levels))}")
    return lines


def _tree(topo: Topology, racks: list[Rack]) -> list[str]:
    per_leaf = topo.spec.network.racks_per_leaf
    lines = ["# NVLink domains (an NVL72 rack, an HGX rack's nodes): one leaf switch each"]
    groups: dict[str, dict[int, list[str]]] = {}
    for rack in racks:
        name = slurm_node_name(rack.id)
        lines.append(f"SwitchName={name} Nodes={hostlist(rack_nodes(topo, rack))}")
        groups.setdefault(rack.region, {}).setdefault(rack.local_index // per_leaf,
                                                      []).append(name)
    lines.append("# scale-out: one switch per leaf group (its racks' leaves on every rail), "
                 "one per region's spines")
    spines = []
    for region, by_leaf in groups.items():
        leaves = []
        for g, members in sorted(by_leaf.items()):
            leaf = f"{slurm_node_name(region)}-leaf-{g}"
            leaves.append(leaf)
            lines.append(f"SwitchName={leaf} Switches={hostlist(members)}")
        spine = f"{slurm_node_name(region)}-spine"
        spines.append(spine)
        lines.append(f"SwitchName={spine} Switches={hostlist(leaves)}")
    if len(spines) > 1:  # regions meet only over their spines: one switch joins them
        lines.append(f"SwitchName={slurm_node_name(topo.spec.name)} Switches={hostlist(spines)}")
    return lines
