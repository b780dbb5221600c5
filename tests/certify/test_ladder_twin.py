"""The ladder on the digital twin: every fault kind is found, alone or together, and nothing
else is reported."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rackscale.certify import Ladder, LadderConfig, LadderConfigError, TwinBackend
from rackscale.faults import (
    FAULT_KINDS,
    Fault,
    TwinHardware,
    demo_faults_path,
    faults_from,
    load_faults,
)
from rackscale.fleet import Topology, seed_fleet

TOPO = Topology.build(seed_fleet())
STEADY = [k for k in FAULT_KINDS if k != "flapping"]
TARGETS = {k: [cid for cid, kind in zip(TOPO.ids, TOPO.kinds, strict=True)
               if kind in FAULT_KINDS[k].target_kinds] for k in STEADY}


def certify(faults: list[Fault], seed: int, **cfg: object):
    ff = faults_from(faults, TOPO)
    return Ladder(TOPO, TwinBackend(TwinHardware(TOPO, ff, seed=seed)),
                  LadderConfig(**cfg)).run()  # type: ignore[arg-type]


def found(run) -> list[tuple[str, str, str | None]]:
    return [(f.component, f.kind, f.evidence.get("of")) for f in run.findings]


@st.composite
def steady_fault(draw, kind: str) -> Fault:
    target = draw(st.sampled_from(TARGETS[kind]))
    k = FAULT_KINDS[kind]
    severity = draw(st.floats(0.1, k.detectable_below - 0.01)) if k.has_severity else None
    return Fault(target=target, kind=kind, severity=severity)


SETTINGS = settings(max_examples=8, deadline=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", STEADY)
def test_each_kind_is_found_exactly_where_injected(kind: str) -> None:
    @SETTINGS
    @given(fault=steady_fault(kind), seed=st.integers(0, 2**31 - 1))
    def prop(fault: Fault, seed: int) -> None:
        run = certify([fault], seed)
        assert found(run) == [(fault.target, kind, None)], fault

    prop()


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(of=st.sampled_from(STEADY), data=st.data(), duty=st.floats(0.2, 0.8),
       seed=st.integers(0, 2**31 - 1))
def test_flapping_fault_is_found_and_named_flapping(of: str, data, duty: float,
                                                    seed: int) -> None:
    k = FAULT_KINDS[of]
    target = data.draw(st.sampled_from(TARGETS[of]))
    severity = data.draw(st.floats(0.1, 0.8)) if k.has_severity else None
    fault = Fault(target=target, kind="flapping", of=of, severity=severity, duty=duty)
    run = certify([fault], seed)
    assert found(run) == [(target, "flapping", of)], fault
    assert 0 < run.findings[0].evidence["present_in_repeats"] < 1


def test_several_faults_together_are_all_found() -> None:
    ff = load_faults(demo_faults_path(), TOPO)
    run = Ladder(TOPO, TwinBackend(TwinHardware(TOPO, ff, seed=11))).run()
    expected = {(f.target, f.kind) for f in ff.faults}
    assert {(f.component, f.kind) for f in run.findings} == expected
    assert len(run.findings) == len(expected)
    flap = next(f for f in run.findings if f.kind == "flapping")
    assert flap.evidence["of"] == "bad_cable"


def test_more_faults_in_distinct_places_are_all_found() -> None:
    faults = [
        Fault(target="us-east/r01/c02/gpu0", kind="gpu_dead"),
        Fault(target="us-east/r01/c05/gpu2", kind="hbm_degraded", severity=0.7),
        Fault(target="us-east/r02/c09/gpu1", kind="nvlink_port_down"),
        Fault(target="us-east/r03/s05", kind="nvlink_switch_degraded", severity=0.5),
        Fault(target="us-west/r02/c10/nic3", kind="nic_dead"),
        Fault(target="us-east/leaf-rail2-0", kind="leaf_down"),
        Fault(target="us-west/r01/ps3", kind="power_shelf_down"),
        Fault(target="us-west/r03/c01/gpu1", kind="slow_gpu", severity=0.9),
    ]
    run = certify(faults, seed=5)
    assert {(f.component, f.kind) for f in run.findings} == {(f.target, f.kind) for f in faults}


def test_slow_gpu_at_095_among_504_is_found_with_no_false_positive() -> None:
    for seed in range(3):
        run = certify([Fault(target="us-west/r02/c13/gpu2", kind="slow_gpu", severity=0.95)],
                      seed)
        assert found(run) == [("us-west/r02/c13/gpu2", "slow_gpu", None)]


def test_healthy_fleet_has_no_findings_and_all_trays_pass() -> None:
    run = certify([], seed=9)
    assert run.findings == []
    assert run.gpus_healthy == run.gpus_passed == 504
    assert {r.verdict for r in run.results} == {"pass"}
    assert all(r.stages_passed == [1, 2, 3, 4] for r in run.results)


def test_escalation_skips_later_stages_for_failed_parts() -> None:
    run = certify([Fault(target="us-east/r02/c03/gpu1", kind="sdc")], seed=2)
    tray = next(r for r in run.results if r.component == "us-east/r02/c03")
    assert tray.verdict == "fail" and tray.stages_passed == []
    rack = next(r for r in run.results if r.component == "us-east/r02")
    assert rack.verdict == "pass" and rack.extra["trays_failed"] == 1


def test_collective_tests_are_far_fewer_than_all_pairs() -> None:
    run = certify([Fault(target="us-west/r01/c03/nic2", kind="bad_cable", severity=0.4)], 1)
    summary = run.summary()
    n = 504
    assert summary["allpairs_tests"] == n * (n - 1) // 2
    assert summary["collective_tests"] <= n * np.log2(n)
    assert summary["tests_vs_allpairs"] >= 100
    assert summary["campaign_s"] > 0


def test_stages_can_be_chosen_and_are_validated() -> None:
    run = certify([Fault(target="us-east/r04/s02", kind="nvlink_switch_down")], 3, stages=(1,))
    assert run.findings == []  # the switch is only visible with NVLink traffic
    with pytest.raises(LadderConfigError, match="valid stages"):
        LadderConfig(stages=(5,))


MIXED = """
name: mixed
regions:
  - name: a
    racks: [{template: hgx-h200, count: 6}]
  - name: b
    racks: [{template: gb200-nvl72, count: 2}, {template: hgx-b200, count: 3, nodes_per_rack: 2}]
"""


@pytest.mark.parametrize(("target", "kind", "severity"), [
    ("a/r02/n03/nvsw1", "nvlink_switch_down", None),
    ("a/r04/n01/gpu5", "nvlink_port_down", None),
    ("b/leaf-rail2-2", "leaf_degraded", 0.7),  # a leaf with only two GPUs under it
    ("b/r04/n02/nic6", "bad_cable", 0.5),
    ("b/r01/c09/gpu0", "slow_gpu", 0.93),
])
def test_hgx_and_mixed_sku_fleet(target: str, kind: str, severity: float | None) -> None:
    from rackscale.fleet import parse_fleet
    topo = Topology.build(parse_fleet(MIXED))
    ff = faults_from([Fault(target=target, kind=kind, severity=severity)], topo)
    run = Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=4))).run()
    assert [(f.component, f.kind) for f in run.findings] == [(target, kind)]


def test_same_seed_same_run_and_nvlink_on_off_comparison_attributes_the_fabric() -> None:
    faults = [Fault(target="us-west/r01/c03/nic2", kind="bad_cable", severity=0.4),
              Fault(target="us-east/r02/s07", kind="nvlink_switch_degraded", severity=0.6)]
    a, b = certify(faults, seed=21), certify(faults, seed=21)
    assert [f.as_dict() for f in a.findings] == [f.as_dict() for f in b.findings]
    cable = next(f for f in a.findings if f.kind == "bad_cable")
    # NVLink off shows the cable's full shortfall; NVLink on (hierarchical) hides part of it
    assert cable.evidence["fabric"] == "scaleout"
    assert cable.evidence["nvlink_off_rel"] < 0.5 < cable.evidence["nvlink_on_rel"] < 0.95
    switch = next(f for f in a.findings if f.kind == "nvlink_switch_degraded")
    assert switch.evidence["fabric"] == "nvlink"
    assert switch.evidence["estimated_severity"] == pytest.approx(0.6, abs=0.03)
    assert all(r["shortfall"] == "none" for r in a.fabric)
