"""The topology stamps a template's layout out per rack (fleet/layout.py) and fills its GPU
columns with array arithmetic; on random fleets every column must agree with what the ids
themselves say (the GPU's tray, NIC, rail, leaf and NVLink domain)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.fleet import (
    GPU,
    NIC,
    TEMPLATES,
    FleetSpec,
    NetworkSpec,
    RackGroup,
    RegionSpec,
    Topology,
)


@st.composite
def fleets(draw: st.DrawFn) -> FleetSpec:
    regions = []
    for r in range(draw(st.integers(1, 3))):
        groups = []
        for name in draw(st.lists(st.sampled_from(sorted(TEMPLATES)), min_size=1, max_size=3,
                                  unique=True)):
            nodes = None
            if TEMPLATES[name].nodes_per_rack_varies:
                nodes = draw(st.none() | st.integers(1, TEMPLATES[name].trays))
            groups.append(RackGroup(template=name, count=draw(st.integers(1, 4)),
                                    nodes_per_rack=nodes))
        regions.append(RegionSpec(name=f"reg{r}", racks=groups))
    net = NetworkSpec(racks_per_leaf=draw(st.integers(1, 5)), spines_per_region=2)
    return FleetSpec(name="prop", regions=regions, network=net)


@settings(max_examples=40, deadline=None)
@given(spec=fleets())
def test_gpu_columns_agree_with_the_ids(spec: FleetSpec) -> None:
    topo = Topology.build(spec)
    assert len(topo.index) == len(topo.ids) == len(topo.kinds) == len(topo.parents)
    for rack in topo.racks:
        rpl = spec.network.racks_per_leaf
        for g in range(rack.gpu_first, rack.gpu_end):
            gid = topo.gpu_ids[g]
            comp = int(topo.gpu_comp[g])
            assert topo.ids[comp] == gid and topo.kinds[comp] == GPU
            tray = gid.rsplit("/", 1)[0]
            slot = int(gid.rsplit("gpu", 1)[1])
            assert topo.ids[int(topo.gpu_tray[g])] == tray == topo.ids[topo.parents[comp]]
            assert int(topo.gpu_slot[g]) == slot
            nic = int(topo.gpu_nic[g])
            assert (topo.ids[nic], topo.kinds[nic]) == (f"{tray}/nic{slot}", NIC)
            assert topo.leaves[int(topo.gpu_leaf[g])] == (
                f"{rack.region}/leaf-rail{slot}-{rack.local_index // rpl}")
            domain = topo.domains[int(topo.gpu_domain[g])]
            assert domain == (rack.id if rack.template.domain_is_rack else tray)
            assert (int(topo.gpu_rack[g]), topo.gpu_sku[g]) == (rack.index, rack.template.gpu)
            assert topo.regions[int(topo.gpu_region[g])] == rack.region
        assert topo.ids[rack.first] == rack.id
        assert all(topo.rack_of[i] == rack.index for i in range(rack.first, rack.end))
    for domain, switches in zip(topo.domains, topo.domain_switches, strict=True):
        assert all(topo.parents[topo.index[s]] == topo.index[domain] for s in switches)


@given(spec=fleets())
@settings(max_examples=25, deadline=None)
def test_every_id_is_unique_and_indexed_at_its_position(spec: FleetSpec) -> None:
    topo = Topology.build(spec)
    assert len(set(topo.ids)) == len(topo.ids)
    assert all(topo.index[cid] == i for i, cid in enumerate(topo.ids))


def test_a_name_the_spec_rules_missed_is_still_refused_at_build() -> None:
    """The backstop: a spec built past its validation with a rack named like a leaf (or two
    racks of one name) would give two parts one id; the build refuses it, naming the id."""
    import pytest

    from rackscale.errors import UserError

    for names in (["leaf-rail0-0"], ["r07", "r07"]):
        group = RackGroup.model_construct(template="vr-nvl72", count=len(names), names=names,
                                          nodes_per_rack=None)
        region = RegionSpec.model_construct(name="a", racks=[group])
        spec = FleetSpec.model_construct(name="x", regions=[region], network=NetworkSpec())
        with pytest.raises(UserError, match=f"a/{names[0]}"):
            Topology.build(spec)
