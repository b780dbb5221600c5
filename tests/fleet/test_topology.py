"""Seed fleet counts, ids, path queries and blast radius."""

from __future__ import annotations

import pytest

from rackscale.errors import UserError
from rackscale.fleet import (
    TEMPLATES,
    FleetSpec,
    RackGroup,
    RegionSpec,
    Topology,
    UnknownComponent,
    parse_fleet,
    synthetic_fleet,
)


def test_seed_counts(seed_topo: Topology) -> None:
    t = seed_topo
    assert len(t.gpu_ids) == 504
    assert t.count("gpu") == 504
    assert t.count("cpu") == 252
    assert t.count("nic") == 504
    assert t.count("compute_tray") == 126
    assert t.count("switch_tray") == 63
    assert t.count("cdu") == 7
    assert len(t.regions) == 2
    assert [len(t.racks) for _ in (0,)] == [7]
    s = t.summary()
    assert s["headline_gpus"] == 504
    assert s["per_region"]["us-east"]["rack"] == 4
    assert s["per_region"]["us-west"]["rack"] == 3
    assert s["peak_is_estimate_for"] == ["rubin"]


def test_component_ids_are_paths(seed_topo: Topology) -> None:
    gpu = seed_topo.component("us-east/r03/c07/gpu2")
    assert (gpu.kind, gpu.parent, gpu.rack, gpu.region, gpu.sku) == (
        "gpu", "us-east/r03/c07", "us-east/r03", "us-east", "rubin")
    assert seed_topo.component("us-east/r03/s04").kind == "switch_tray"
    assert seed_topo.component("us-east/r03/cdu").attributes["required_flow_lpm"] == pytest.approx(
        190 * 1.43, rel=1e-3)
    assert seed_topo.component("us-east/leaf-rail2-0").attributes == {"rail": 2}
    tray = [c.id for c in seed_topo.children("us-west/r01/c01")]
    assert tray[:4] == [f"us-west/r01/c01/gpu{k}" for k in range(4)]
    assert len(tray) == 12  # 4 GPU, 2 CPU, 4 NIC, 2 DPU
    # ids are unique
    assert len(set(seed_topo.ids)) == len(seed_topo.ids)


def test_components_by_kind_and_scope(seed_topo: Topology) -> None:
    assert len(list(seed_topo.components("gpu", scope="us-west"))) == 216
    assert len(list(seed_topo.components("gpu", scope="us-east/r02"))) == 72
    assert len(list(seed_topo.components("nic", scope="us-east/r02/c18"))) == 4
    assert len(list(seed_topo.components("leaf", scope="us-east"))) == 8  # 4 rails x 2 groups
    with pytest.raises(UserError, match="valid kinds"):
        list(seed_topo.components("gpus"))


def test_unknown_id_lists_siblings(seed_topo: Topology) -> None:
    with pytest.raises(UnknownComponent, match="holds: us-east/r01/c01/gpu0"):
        seed_topo.component("us-east/r01/c01/gpu7")
    with pytest.raises(UnknownComponent, match="regions are: us-east, us-west"):
        seed_topo.component("eu-north/r01")


def test_path_inside_nvlink_domain(seed_topo: Topology) -> None:
    p = seed_topo.path("us-east/r01/c01/gpu0", "us-east/r01/c18/gpu3")
    assert p.fabric == "nvlink"
    assert p.hops[1] == tuple(f"us-east/r01/s{k:02d}" for k in range(1, 10))


def test_path_same_leaf_skips_spines(seed_topo: Topology) -> None:
    # r01 and r02 share leaf group 0 (racks_per_leaf=2); rail 1 on both sides.
    p = seed_topo.path("us-east/r01/c01/gpu1", "us-east/r02/c05/gpu1")
    assert p.fabric == "scaleout"
    assert [h[0] for h in p.hops] == [
        "us-east/r01/c01/gpu1", "us-east/r01/c01/nic1", "us-east/leaf-rail1-0",
        "us-east/r02/c05/nic1", "us-east/r02/c05/gpu1"]


def test_path_across_leaves_and_regions(seed_topo: Topology) -> None:
    p = seed_topo.path("us-east/r01/c01/gpu0", "us-east/r03/c01/gpu2")
    assert [h[0] for h in p.hops] == [
        "us-east/r01/c01/gpu0", "us-east/r01/c01/nic0", "us-east/leaf-rail0-0",
        "us-east/spine-0", "us-east/leaf-rail2-1", "us-east/r03/c01/nic2",
        "us-east/r03/c01/gpu2"]
    assert len(p.hops[3]) == 8  # ECMP over every spine
    x = seed_topo.path("us-east/r01/c01/gpu0", "us-west/r03/c01/gpu0")
    assert x.hops[3][0] == "us-east/spine-0" and x.hops[4][0] == "us-west/spine-0"
    with pytest.raises(UserError, match="not a GPU"):
        seed_topo.path("us-east/r01/c01/nic0", "us-east/r01/c01/gpu0")


def test_blast_radius_of_leaf(seed_topo: Topology) -> None:
    gpus = seed_topo.affected_gpu_ids("us-east/leaf-rail2-1")
    # rail 2 of racks r03 and r04: 2 racks x 18 trays, gpu2 of each tray
    assert len(gpus) == 36
    assert all(g.endswith("/gpu2") for g in gpus)
    assert {g.split("/")[1] for g in gpus} == {"r03", "r04"}
    # every one of those GPUs really routes through that leaf
    for g in gpus[:5]:
        p = seed_topo.path(g, "us-east/r01/c01/gpu0")
        assert ("us-east/leaf-rail2-1",) in p.hops


def test_blast_radius_of_cdu_and_parts(seed_topo: Topology) -> None:
    cdu = seed_topo.affected_gpu_ids("us-west/r02/cdu")
    assert len(cdu) == 72 and all(g.startswith("us-west/r02/") for g in cdu)
    assert seed_topo.affected_gpu_ids("us-west/r02/s05") == cdu  # NVLink domain
    assert seed_topo.affected_gpu_ids("us-west/r02/ps3") == cdu
    assert seed_topo.affected_gpu_ids("us-west/r02/c03/nic1") == ["us-west/r02/c03/gpu1"]
    assert seed_topo.affected_gpu_ids("us-west/r02/c03/cpu0") == [
        "us-west/r02/c03/gpu0", "us-west/r02/c03/gpu1"]
    assert len(seed_topo.affected_gpus("us-west/r02/c03")) == 4
    assert len(seed_topo.affected_gpus("us-west/spine-3")) == 216


def test_hgx_nodes_are_their_own_domains() -> None:
    spec = FleetSpec(name="h", regions=[RegionSpec(name="lab", racks=[
        RackGroup(template="hgx-h200", count=2, nodes_per_rack=3)])])
    t = Topology.build(spec)
    assert len(t.gpu_ids) == 48
    assert t.count("node") == 6 and t.count("nvswitch") == 24
    p = t.path("lab/r01/n01/gpu0", "lab/r01/n01/gpu7")
    assert p.fabric == "nvlink" and p.hops[1] == tuple(f"lab/r01/n01/nvsw{k}" for k in range(4))
    assert t.path("lab/r01/n01/gpu0", "lab/r01/n02/gpu0").fabric == "scaleout"
    assert t.count("leaf") == 8  # 8 rails, one leaf group
    assert len(t.affected_gpus("lab/r01/n02/nvsw1")) == 8


@pytest.mark.parametrize("template", sorted(TEMPLATES))
def test_every_template_builds(template: str) -> None:
    t = Topology.build(parse_fleet(f"name: x\nregions:\n  - name: a\n    racks: [{{template: "
                                   f"{template}, count: 1}}]\n"))
    tmpl = TEMPLATES[template]
    per = tmpl.trays * tmpl.gpus_per_tray
    assert len(t.gpu_ids) == per
    assert all(t.racks[0].template.gpu == s for s in t.gpu_sku)


def test_synthetic_design_target() -> None:
    t = Topology.build(synthetic_fleet(30, regions=3))
    assert len(t.racks) == 30 and len(t.gpu_ids) == 30 * 72
    assert [r.id for r in t.racks[:2]] == ["region-0/r01", "region-0/r02"]
