"""The id grammar's functions and the topology's id questions agree with `Topology.holder` on
every component of random mixed fleets: the rack and tray of a part, what is within what, and
Slurm node names both ways."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.fleet import (
    FleetSpec,
    Topology,
    id_name,
    is_within,
    parent_id,
    path_below_rack,
    rack_path,
    slurm_node_name,
)

TEMPLATES = ["gb200-nvl72", "vr-nvl72", "hgx-h100", "hgx-b200"]


@st.composite
def fleets(draw: st.DrawFn) -> Topology:
    regions = draw(st.lists(st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=2,
                                     unique=True), min_size=1, max_size=2))
    return Topology.build(FleetSpec.model_validate({"name": "ids", "regions": [
        {"name": f"reg{i}", "racks": [{"template": t, "count": draw(st.integers(1, 2))}
                                      for t in group]} for i, group in enumerate(regions)]}))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(topo=fleets())
def test_every_id_question_agrees_with_the_holder(topo: Topology) -> None:
    for cid in topo.ids:
        h = topo.holder(cid)
        assert topo.rack_id(cid) == h.rack
        assert topo.tray_id(cid) == h.tray
        assert is_within(cid, h.region) and is_within(cid, cid)
        if h.rack is not None:  # inside a rack the path names the rack
            assert rack_path(cid) == h.rack and is_within(cid, h.rack)
            assert path_below_rack(cid) == ("" if cid == h.rack else cid[len(h.rack) + 1:])
        if h.tray is not None:
            assert is_within(cid, h.tray)
            assert topo.slurm_node_of(cid) == slurm_node_name(h.tray)
        if cid != h.region:
            assert id_name(cid) == cid.split("/")[-1]
            assert parent_id(cid) + "/" + id_name(cid) == cid
    nodes = topo.trays_by_slurm_node()
    assert len(nodes) == len(set(topo.gpu_tray.tolist()))
    assert all(topo.slurm_node_of(tray) == node for node, tray in nodes.items())


def test_within_is_by_path_segment_not_by_prefix() -> None:
    assert is_within("us-east/r03/c07/gpu2", "us-east/r03")
    assert not is_within("us-east/r030", "us-east/r03")
    assert not is_within("us-east/r03", "us-east/r03/c07")
    assert rack_path("us-east") is None and path_below_rack("us-east/r03") == ""
