"""The block plugin's topology.conf checked against Slurm's documented rules (topology.conf(5),
Slurm 23.11 and later; no such Slurm is installed here, so this is the check): one BlockName
line per NVLink domain with its nodes, every block holding at least the first BlockSizes
value, each further size a power of two times the one before. The tree output is checked by a
real slurmctld in tests/lifecycle/test_slurm_topology.py."""

from __future__ import annotations

import itertools
import re

import pytest

from rackscale.errors import UserError
from rackscale.fleet import (
    FleetSpec,
    RackGroup,
    RegionSpec,
    Topology,
    hostlist,
    render_topology_conf,
    seed_fleet,
)

_LINE = re.compile(r"^BlockName=(\S+) Nodes=(\S+)$")


def _expand(expr: str) -> list[str]:
    """A hostlist expression of the shapes `hostlist` writes, expanded (prefix[a-b,c])."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", expr):
        m = re.fullmatch(r"(.*)\[(.*)\]", part)
        if m is None:
            out.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            out.extend(f"{m.group(1)}{k:0{len(lo)}d}" for k in range(int(lo), int(hi or lo) + 1))
    return out


def _blocks(text: str) -> tuple[dict[str, list[str]], list[int]]:
    blocks: dict[str, list[str]] = {}
    sizes: list[int] = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        if line.startswith("BlockSizes="):
            sizes = [int(v) for v in line.removeprefix("BlockSizes=").split(",")]
            continue
        m = _LINE.match(line)
        assert m is not None, f"not a topology/block line: {line!r}"
        assert m.group(1) not in blocks, f"block {m.group(1)} named twice"
        blocks[m.group(1)] = _expand(m.group(2))
    return blocks, sizes


def _check_documented_rules(blocks: dict[str, list[str]], sizes: list[int]) -> None:
    assert sizes, "BlockSizes missing"
    assert all(len(n) >= sizes[0] for n in blocks.values()), (sizes, blocks)
    for lo, hi in itertools.pairwise(sizes):
        ratio = hi // lo
        assert hi % lo == 0 and ratio >= 2 and ratio & (ratio - 1) == 0, sizes
    nodes = [n for ns in blocks.values() for n in ns]
    assert len(nodes) == len(set(nodes)), "a node in two blocks"


def test_seed_fleet_blocks_are_its_racks() -> None:
    topo = Topology.build(seed_fleet("seed-504"))
    blocks, sizes = _blocks(render_topology_conf(topo, "block"))
    _check_documented_rules(blocks, sizes)
    assert list(blocks) == [r.id.replace("/", "-") for r in topo.racks]
    assert blocks["us-east-r03"] == [f"us-east-r03-c{k:02d}" for k in range(1, 19)]
    assert sizes == [18, 36, 72]  # 7 domains: aggregates of 1, 2 and 4 racks


def test_a_mixed_fleet_gives_hgx_racks_blocks_of_their_nodes() -> None:
    topo = Topology.build(FleetSpec(name="mixed", regions=[RegionSpec(name="m", racks=[
        RackGroup(template="gb200-nvl72", count=2),
        RackGroup(template="hgx-b200", count=3, nodes_per_rack=4)])]))
    blocks, sizes = _blocks(render_topology_conf(topo, "block"))
    _check_documented_rules(blocks, sizes)
    assert blocks["m-r03"] == ["m-r03-n01", "m-r03-n02", "m-r03-n03", "m-r03-n04"]
    assert sizes[0] == 4  # the smallest block: every block must hold at least the first size


def test_a_drained_or_failed_tray_does_not_change_the_text() -> None:
    topo = Topology.build(seed_fleet("seed-504"))
    text = render_topology_conf(topo, "tree")
    assert text == render_topology_conf(Topology.build(seed_fleet("seed-504")), "tree")
    assert "us-west-r02" not in render_topology_conf(topo, "tree", leave_out={"us-west/r02"})


def test_hostlist_compresses_runs_and_keeps_other_names() -> None:
    assert hostlist(["a-c01", "a-c02", "a-c03", "a-c07", "odd", "b9"]) == "a-c[01-03,07],odd,b9"
    assert _expand(hostlist(["x-c01", "x-c02"])) == ["x-c01", "x-c02"]


def test_an_unknown_plugin_names_the_valid_ones() -> None:
    with pytest.raises(UserError, match="valid plugins: tree, block"):
        render_topology_conf(Topology.build(seed_fleet("seed-504")), "torus")
