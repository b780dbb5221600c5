"""Topology.gpu_place / tray_gpus: which tray, domain and rack hold a GPU, by the template's
own numbers (an NVL72 compute tray holds 4 GPUs, an HGX node 8), never by id arithmetic."""

from __future__ import annotations

import pytest

from rackscale.errors import UserError
from rackscale.fleet import TEMPLATES, FleetSpec, RackGroup, RegionSpec, Topology, slurm_node_name


def _topo(template: str, racks: int = 2) -> Topology:
    return Topology.build(FleetSpec(name=f"f-{template}", regions=[
        RegionSpec(name="east", racks=[RackGroup(template=template, count=racks)])]))


@pytest.fixture(scope="module")
def nvl72() -> Topology:
    return _topo("gb200-nvl72")


@pytest.fixture(scope="module")
def hgx() -> Topology:
    return _topo("hgx-h100")


def test_an_nvl72_gpu_sits_on_a_tray_of_4_in_the_racks_domain(nvl72: Topology) -> None:
    p = nvl72.gpu_place("east/r02/c03/gpu1")
    assert (p.tray, p.domain, p.rack, p.region) == (
        "east/r02/c03", "east/r02", "east/r02", "east")
    assert p.slot == 1 and p.nic == "east/r02/c03/nic1"
    assert p.number == 72 + 2 * 4 + 1  # rack r01's 72 GPUs, then two trays of 4
    assert nvl72.gpu_place(p.number) == p
    assert nvl72.tray_gpus("east/r02/c03") == [f"east/r02/c03/gpu{k}" for k in range(4)]
    assert len(nvl72.tray_gpus("east/r01/c18")) == TEMPLATES["gb200-nvl72"].gpus_per_tray


def test_an_hgx_gpu_sits_on_a_node_of_8_that_is_its_own_domain(hgx: Topology) -> None:
    p = hgx.gpu_place("east/r01/n02/gpu7")
    assert (p.tray, p.domain, p.rack) == ("east/r01/n02", "east/r01/n02", "east/r01")
    assert p.slot == 7 and p.number == 8 + 7
    assert hgx.tray_gpus("east/r01/n02") == [f"east/r01/n02/gpu{k}" for k in range(8)]
    assert TEMPLATES["hgx-h100"].gpus_per_tray == 8


@pytest.mark.parametrize("template", ["gb200-nvl72", "hgx-h100"])
def test_the_bulk_maps_agree_with_gpu_place(template: str) -> None:
    topo = _topo(template)
    trays, domains = topo.tray_of_gpus(), topo.domain_of_gpus()
    assert list(trays) == topo.gpu_ids
    for p in topo.gpu_places():
        assert trays[p.gpu] == p.tray and domains[p.gpu] == p.domain
        assert p.gpu in topo.tray_gpus(p.tray)
    # the Slurm/Kubernetes node of every GPU is its tray's (HGX: node's) name
    assert {slurm_node_name(t) for t in trays.values()} == {
        slurm_node_name(c.id) for c in topo.components(TEMPLATES[template].tray_kind)}


def test_gpu_place_and_tray_gpus_refuse_what_is_not_a_gpu_or_tray(nvl72: Topology) -> None:
    with pytest.raises(UserError, match="not a GPU"):
        nvl72.gpu_place("east/r01/c01")
    with pytest.raises(UserError, match="outside fleet"):
        nvl72.gpu_place(len(nvl72.gpu_ids))
    with pytest.raises(UserError, match="not a compute tray or node"):
        nvl72.tray_gpus("east/r01/c01/gpu0")

