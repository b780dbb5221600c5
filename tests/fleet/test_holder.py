"""One owner for "which tray, rack or NVLink domain holds this part": Topology.holder, checked
for every component kind on an NVL72 and an HGX fleet; and the rack rules as template data."""

from __future__ import annotations

import pytest

from rackscale.fleet import (
    KINDS,
    TEMPLATES,
    FleetSpec,
    RackGroup,
    RegionSpec,
    Topology,
    UnknownComponent,
)


@pytest.fixture(scope="module")
def mixed_topo() -> Topology:
    return Topology.build(FleetSpec(name="mixed", regions=[
        RegionSpec(name="east", racks=[RackGroup(template="vr-nvl72", count=2)]),
        RegionSpec(name="west", racks=[RackGroup(template="hgx-b200", count=1,
                                                 nodes_per_rack=3)]),
    ]))


def _expected(topo: Topology, cid: str) -> tuple[str, str | None, str | None, str | None]:
    """The holder written out by id arithmetic, independently of Topology.holder."""
    kind = topo.kinds[topo.idx(cid)]
    parts = cid.split("/")
    if kind in ("region",):
        return "region", None, None, None
    if kind in ("leaf", "spine"):
        return "fabric", None, None, None
    rack = "/".join(parts[:2])
    nvl72 = topo.rack(cid).template.name.endswith("nvl72")
    if kind in ("rack", "switch_tray", "cdu", "power_shelf"):
        return "rack", rack, None, rack if nvl72 else None
    tray = "/".join(parts[:3])
    return "tray", rack, tray, rack if nvl72 else tray


def test_every_component_kind_has_a_holder(mixed_topo: Topology) -> None:
    seen = set()
    for cid in mixed_topo.ids:
        h = mixed_topo.holder(cid)
        assert (h.level, h.rack, h.tray, h.domain) == _expected(mixed_topo, cid), cid
        assert h.kind == mixed_topo.kinds[mixed_topo.idx(cid)] and h.component == cid
        assert h.region == cid.split("/")[0]
        if h.domain is not None:  # the domain named is one the topology knows
            assert h.domain in mixed_topo.domains
        seen.add(h.kind)
    assert seen == set(KINDS)


def test_holder_agrees_with_the_blast_radius(mixed_topo: Topology) -> None:
    """A tray-level part's fault stays inside its tray's GPUs."""
    for cid in mixed_topo.ids:
        h = mixed_topo.holder(cid)
        if h.level == "tray":
            tray_gpus = set(mixed_topo.affected_gpu_ids(h.tray))
            assert set(mixed_topo.affected_gpu_ids(cid)) <= tray_gpus


def test_holder_of_an_unknown_id_names_the_parent(mixed_topo: Topology) -> None:
    with pytest.raises(UnknownComponent, match="east/r01 holds"):
        mixed_topo.holder("east/r01/c99")


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_rack_rules_are_template_data(name: str) -> None:
    t = TEMPLATES[name]
    if t.shape == "nvl72":
        assert (t.domain_is_rack, t.tray_kind, t.switch_kind) == (True, "compute_tray",
                                                                  "switch_tray")
        assert t.cordon_on_bad_trays and t.max_bad_trays == 2 and not t.nodes_per_rack_varies
    else:
        assert (t.domain_is_rack, t.tray_kind, t.switch_kind) == (False, "node", "nvswitch")
        assert not t.cordon_on_bad_trays and t.nodes_per_rack_varies
