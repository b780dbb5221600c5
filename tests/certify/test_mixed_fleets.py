"""The ladder on mixed-SKU fleets: every group is expected to do what its own members and links
can (the fleet's hardware model), so a clean mixed fleet has no finding and a fault is named
where it is, whatever templates share a region and in whatever order regions are listed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rackscale.certify import Ladder, TwinBackend
from rackscale.faults import FAULT_KINDS, Fault, TwinHardware, faults_from
from rackscale.fleet import (
    LEAF,
    NIC,
    TEMPLATES,
    FleetSpec,
    RackGroup,
    RegionSpec,
    Topology,
    parse_fleet,
)

STEADY = [k for k in FAULT_KINDS if k != "flapping"]
SCALEOUT = ("bad_cable", "nic_dead")
IN_RACK = [k for k in STEADY if LEAF not in FAULT_KINDS[k].target_kinds]
REGION_NAMES = ("us-east", "us-west", "eu-north")
PROPERTY = settings(max_examples=40, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def certify(topo: Topology, faults: list[Fault], seed: int = 4):
    ff = faults_from(faults, topo)
    return Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=seed))).run()


def found(run) -> list[tuple[str, str]]:
    return sorted((f.component, f.kind) for f in run.findings)


@st.composite
def fleets(draw) -> Topology:
    """1-3 regions in random order, each a random mix of the six rack templates."""
    n_regions = draw(st.integers(1, 3))
    names = draw(st.permutations(REGION_NAMES))[:n_regions]
    regions = []
    for name in names:
        groups = draw(st.lists(st.tuples(st.sampled_from(sorted(TEMPLATES)), st.integers(1, 2)),
                               min_size=1, max_size=3))
        regions.append(RegionSpec(name=name, racks=[RackGroup(template=t, count=c)
                                                    for t, c in groups]))
    return Topology.build(FleetSpec(name="prop", regions=regions))


def targets(topo: Topology, kind: str) -> list[str]:
    """Places a fault of `kind` can sit and matter: a leaf needs GPUs under it (a mixed
    region has rails that only its HGX racks use)."""
    want = FAULT_KINDS[kind].target_kinds
    out = [cid for cid, k in zip(topo.ids, topo.kinds, strict=True) if k in want]
    if LEAF in want:
        out = [cid for cid in out if len(topo.affected_gpus(cid)) >= 2]
    return out


@st.composite
def fault_in(draw, topo: Topology, kind: str, places: list[str] | None = None) -> Fault:
    of = kind
    if kind == "flapping":
        of = draw(st.sampled_from(STEADY))
    target = draw(st.sampled_from(places if places is not None else targets(topo, of)))
    k = FAULT_KINDS[of]
    severity = draw(st.floats(0.1, min(k.detectable_below, 0.85) - 0.01)) if k.has_severity \
        else None
    if kind == "flapping":
        return Fault(target=target, kind="flapping", of=of, severity=severity,
                     duty=draw(st.floats(0.25, 0.75)))
    return Fault(target=target, kind=kind, severity=severity)


@PROPERTY
@given(topo=fleets(), seed=st.integers(0, 2**31 - 1))
def test_clean_mixed_fleet_has_no_finding(topo: Topology, seed: int) -> None:
    run = certify(topo, [], seed)
    assert found(run) == [], _yaml(topo)
    assert run.gpus_healthy == run.gpus_total


def _yaml(topo: Topology) -> str:
    return str(topo.spec.model_dump(exclude_defaults=True))


@PROPERTY
@given(topo=fleets(), kind=st.sampled_from(list(FAULT_KINDS)), data=st.data(),
       seed=st.integers(0, 2**31 - 1))
def test_one_fault_anywhere_is_the_one_finding(topo: Topology, kind: str, data,
                                                seed: int) -> None:
    fault = data.draw(fault_in(topo, kind))
    run = certify(topo, [fault], seed)
    assert found(run) == [(fault.target, kind)], (fault, _yaml(topo))
    if kind == "flapping":
        assert run.findings[0].evidence["of"] == fault.of


def _shares_leaf(topo: Topology, a: str, b: str) -> bool:
    return bool(np.intersect1d(topo.gpu_leaf[topo.affected_gpus(a)],
                               topo.gpu_leaf[topo.affected_gpus(b)]).size)


@PROPERTY
@given(topo=fleets(), kinds=st.tuples(st.sampled_from(IN_RACK), st.sampled_from(IN_RACK)),
       data=st.data(), seed=st.integers(0, 2**31 - 1))
def test_two_faults_in_different_racks_are_both_found(topo: Topology, kinds: tuple[str, str],
                                                       data, seed: int) -> None:
    assume(len(topo.racks) >= 2)
    first = data.draw(fault_in(topo, kinds[0]))
    rack = topo.rack(first.target).id

    def elsewhere(cid: str) -> bool:
        if topo.rack(cid).id == rack:
            return False
        # Two cable faults in one leaf ring look like the leaf (both halves short): group
        # testing names one part per ring, so the second one sits under another leaf.
        return not (topo.kinds[topo.idx(cid)] == NIC and kinds[0] in SCALEOUT
                    and _shares_leaf(topo, cid, first.target))

    places = [c for c in targets(topo, kinds[1]) if elsewhere(c)]
    assume(places)  # every other rack shares the first cable fault's leaf ring
    second = data.draw(fault_in(topo, kinds[1], places))
    run = certify(topo, [first, second], seed)
    assert found(run) == sorted({(first.target, kinds[0]), (second.target, kinds[1])}), \
        _yaml(topo)


# ---------------------------------------------------------------- the reported cases
def _fleet(*regions: tuple[str, list[tuple[str, int]]]) -> Topology:
    return Topology.build(FleetSpec(name="mixed", regions=[
        RegionSpec(name=name, racks=[RackGroup(template=t, count=c) for t, c in groups])
        for name, groups in regions]))


GB200 = ("gb", [("gb200-nvl72", 2)])
H100 = ("hx", [("hgx-h100", 2)])


@pytest.mark.parametrize("regions", [(GB200, H100), (H100, GB200)], ids=["gb-first", "hgx-first"])
def test_gb200_region_and_hgx_h100_region_are_clean_in_either_order(regions) -> None:
    run = certify(_fleet(*regions), [])
    assert found(run) == []
    assert run.gpus_healthy == run.gpus_total == 2 * 72 + 2 * 32


@pytest.mark.parametrize("groups", [
    [("vr-nvl72", 2), ("gb200-nvl72", 2)],
    [("vr-nvl72", 1), ("gb200-nvl72", 1)],
    [("vr-nvl72", 2), ("gb300-nvl72", 1)],
    [("vr-nvl72", 1), ("gb300-nvl72", 1)],
])
def test_region_mixing_nvl72_generations_is_clean(groups) -> None:
    run = certify(_fleet(("a", groups)), [])
    assert found(run) == []
    assert run.gpus_healthy == run.gpus_total


def test_coolant_flow_low_on_a_mixed_fleet_is_found_without_a_crash() -> None:
    topo = _fleet(("a", [("vr-nvl72", 3), ("gb300-nvl72", 1)]))
    run = certify(topo, [Fault(target="a/r01/cdu", kind="coolant_flow_low", severity=0.5)])
    assert found(run) == [("a/r01/cdu", "coolant_flow_low")]
    assert run.gpus_healthy == run.gpus_total - 72


def test_a_cable_on_the_fast_side_of_a_mixed_leaf_is_found() -> None:
    # r01 (CX-9, 200 GB/s) and r02 (CX-7, 50 GB/s) share every leaf: at 40% the cable still
    # runs faster than the CX-7 links, so a ring mixing both speeds would never see it.
    topo = _fleet(("a", [("vr-nvl72", 1), ("gb200-nvl72", 1)]))
    run = certify(topo, [Fault(target="a/r01/c05/nic1", kind="bad_cable", severity=0.4)])
    assert found(run) == [("a/r01/c05/nic1", "bad_cable")]


def test_an_unexplained_shortfall_is_blamed_on_the_scope_holding_the_group() -> None:
    from rackscale.certify.state import holding_scope

    topo = _fleet(("a", [("gb200-nvl72", 2)]), ("b", [("hgx-h100", 2)]))
    assert holding_scope(topo, np.arange(0, 72)) == "a/r01"
    assert holding_scope(topo, np.arange(0, 144)) == "a"
    assert holding_scope(topo, np.asarray([0, 150])) == "mixed"  # the whole fleet


def test_hardware_model_ring_runs_at_its_slowest_link_and_takes_stated_rates() -> None:
    from rackscale.fleet import HardwareModel

    topo = _fleet(("a", [("vr-nvl72", 1), ("gb200-nvl72", 1)]))
    hw = HardwareModel(topo)
    vr, gb = "a/r01/c01/gpu0", "a/r02/c01/gpu0"
    assert hw.expected_busbw([vr, "a/r01/c02/gpu0"], nvlink=False) == 1600 / 8
    assert hw.expected_busbw([vr, gb], nvlink=False) == 400 / 8  # the CX-7 sets the pace
    assert hw.expected_busbw([vr, "a/r01/c09/gpu3"], nvlink=True) == 3600 / 2
    # NVLink on across two domains: hierarchical, 1 GPU per domain carries all the data
    assert hw.expected_busbw([vr, gb], nvlink=True) == pytest.approx(1 / (1 / 900 + 1 / 50))
    lab = hw.with_rates(scaleout_gbps=1.25)  # a lab's links shaped to 10 Gb/s
    assert lab.expected_busbw([vr, gb], nvlink=False) == 1.25
    with pytest.raises(ValueError, match="one per GPU"):
        hw.with_rates(nvlink_gbps=np.ones(3))
    # the twin answers from the same model: a healthy ring measures the model x efficiency
    twin = TwinHardware(topo, seed=1, noise=0.0, hardware=lab)
    flat = hw.gpus([vr, gb])
    bw, _ = twin.allreduce(flat, np.asarray([0, 2]), nvlink=False, t=0.0)
    assert bw[0] == pytest.approx(1.25 * 0.92)


def test_ladder_judges_against_a_runners_stated_link_rates() -> None:
    # A runner whose links are shaped to other rates than the spec states them: the ladder,
    # given the same model, finds nothing on healthy links and still names a slow cable.
    from rackscale.fleet import HardwareModel

    topo = parse_fleet("name: lab\nregions:\n  - name: a\n    racks: "
                       "[{template: hgx-h100, count: 2}, {template: gb200-nvl72, count: 1}]\n")
    topo = Topology.build(topo)
    hw = HardwareModel(topo).with_rates(scaleout_gbps=np.where(
        np.asarray(topo.gpu_sku) == "gb200", 2.5, 1.25))
    ff = faults_from([Fault(target="a/r03/c04/nic2", kind="bad_cable", severity=0.6)], topo)
    run = Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=3, hardware=hw)),
                 hardware=hw).run()
    assert found(run) == [("a/r03/c04/nic2", "bad_cable")]


def _lone_fleet() -> Topology:
    # r01 (VR) and r02 (one HGX node) share a leaf: on rails 0-3 the HGX GPU is the only one
    # of its link class under it; r03 and r04 (one node each) share the other leaf.
    return Topology.build(FleetSpec(name="lone", regions=[RegionSpec(name="a", racks=[
        RackGroup(template="vr-nvl72", count=1),
        RackGroup(template="hgx-h100", count=3, nodes_per_rack=1)])]))


def test_a_gpu_alone_of_its_link_class_under_a_leaf_is_still_tested() -> None:
    topo = _lone_fleet()
    clean = certify(topo, [])
    assert found(clean) == [] and clean.gpus_passed == clean.gpus_total
    run = certify(topo, [Fault(target="a/r02/n01/nic1", kind="bad_cable", severity=0.5)])
    assert found(run) == [("a/r02/n01/nic1", "bad_cable")]


def test_certify_run_cli_on_a_mixed_fleet_with_coolant_fault(tmp_path) -> None:
    import json

    from typer.testing import CliRunner

    from rackscale.cli import app

    spec = tmp_path / "mixed.yaml"
    spec.write_text("name: mixed\nregions:\n  - name: gb\n    racks: [{template: gb200-nvl72, "
                    "count: 2}]\n  - name: hx\n    racks: [{template: hgx-h100, count: 2}]\n")
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {target: gb/r02/cdu, kind: coolant_flow_low, "
                      "severity: 0.5}\n")
    common = ["--fleet", str(spec), "--db", f"sqlite:///{tmp_path}/r.db", "--out",
              str(tmp_path / "f.jsonl"), "--json"]
    clean = CliRunner().invoke(app, ["certify", "run", *common])
    assert clean.exit_code == 0, clean.output
    summary = json.loads(clean.stdout)
    assert (summary["findings"], summary["gpus_healthy"]) == ([], 208), summary
    hot = CliRunner().invoke(app, ["certify", "run", *common, "--faults", str(faults)])
    assert hot.exit_code == 1, hot.output  # exit 1: something failed, and no traceback
    assert json.loads(hot.stdout)["gpus_healthy"] == 208 - 72


@given(topo=fleets(), data=st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_link_classes_are_the_sorted_distinct_sku_rate_pairs(topo: Topology, data) -> None:
    """Each GPU's link class names its own SKU and rate, and the classes are the distinct
    (SKU, rate) pairs in sorted order, on any mix of templates and stated rates."""
    from rackscale.fleet import HardwareModel

    n = len(topo.gpu_ids)
    rates = np.asarray(data.draw(st.lists(st.sampled_from([25.0, 50.0, 100.0, 450.0, 900.0]),
                                          min_size=n, max_size=n)))
    hw = HardwareModel(topo).with_rates(scaleout_gbps=rates)
    for fabric, names, sku in (("nvlink", hw.sku_names, hw.gpu_sku),
                               ("scaleout", hw.nic_names, hw.gpu_nic_sku)):
        classes, idx = hw.classes(fabric), hw.gpu_class(fabric)
        rate = hw.rates(fabric)
        pairs = sorted({(int(s), float(r)) for s, r in zip(sku, rate, strict=True)})
        assert [(c.sku, c.gbps) for c in classes] == [(names[s], r) for s, r in pairs]
        for i in range(n):
            assert (classes[idx[i]].sku, classes[idx[i]].gbps) == (names[sku[i]], rate[i])
