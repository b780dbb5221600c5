"""`coolant_flow_low` on the lab (no root): which ranks it throttles, to what CPU quota, and
that the quota composes with a slow GPU as the twin's factors do."""

from __future__ import annotations

from typing import Any

import pytest
from lab_rig import FLEET

from rackscale.faults import Fault, clock_fraction
from rackscale.fleet import Topology, load_fleet
from rackscale.lab import LabError, check_real, injector, make_plan

PLAN = make_plan(Topology.build(load_fleet(FLEET)), "abcd")
R01 = [r.gpu for r in PLAN.ranks if r.domain == "lab/r01"]
R02 = [r.gpu for r in PLAN.ranks if r.domain == "lab/r02"]


def _cool(flow: float, rack: str = "lab/r01") -> dict[str, Any]:
    return {"kind": "coolant_flow_low", "target": f"{rack}/cdu", "severity": flow}


def test_a_cooled_rack_throttles_every_rank_of_it_and_no_other() -> None:
    limits = injector.cpu_limits(PLAN, [_cool(0.5)])
    assert R01 and R02
    assert {limits[g] for g in R01} == {PLAN.cpu_base * clock_fraction(0.5)}
    assert {limits[g] for g in R02} == {PLAN.cpu_base}


def test_a_slow_gpu_in_a_hot_rack_gets_both_factors_and_the_lowest_flow_counts() -> None:
    slow = {"kind": "slow_gpu", "target": R01[0], "severity": 0.5}
    limits = injector.cpu_limits(PLAN, [_cool(0.8), slow, _cool(0.4)])
    assert limits[R01[0]] == pytest.approx(PLAN.cpu_base * 0.5 * clock_fraction(0.4))
    assert limits[R01[1]] == pytest.approx(PLAN.cpu_base * clock_fraction(0.4))


@pytest.mark.parametrize("target", ["lab/r09/cdu", "lab/r01", "lab/r01/c01/gpu0"])
def test_a_target_that_is_not_a_lab_racks_cdu_is_refused(target: str) -> None:
    with pytest.raises(LabError, match="not the CDU"):
        injector.cpu_limits(PLAN, [{"kind": "coolant_flow_low", "target": target,
                                    "severity": 0.5}])


def test_apply_sets_the_racks_cgroups_and_lifting_restores_them(monkeypatch) -> None:
    written: dict[str, float] = {}
    monkeypatch.setattr(injector.sysops, "cgroups", lambda: None)
    monkeypatch.setattr(injector.sysops, "cg_set_cpu",
                        lambda _cg, name, cores: written.__setitem__(name, cores))
    slow = {"kind": "slow_gpu", "target": R01[1], "severity": 0.5}
    injector.apply(PLAN, "coolant_flow_low", "lab/r01/cdu", 0.5, on=True, others=[slow])
    top = injector.cg_top(PLAN.lab_id)
    cg = {r.gpu: f"{top}/{r.cgroup}" for r in PLAN.ranks}
    assert set(written) == {cg[g] for g in R01}
    assert written[cg[R01[0]]] == pytest.approx(PLAN.cpu_base * clock_fraction(0.5))
    assert written[cg[R01[1]]] == pytest.approx(PLAN.cpu_base * 0.5 * clock_fraction(0.5))
    written.clear()
    injector.apply(PLAN, "coolant_flow_low", "lab/r01/cdu", 0.5, on=False, others=[slow])
    assert written[cg[R01[0]]] == PLAN.cpu_base  # back to its share...
    assert written[cg[R01[1]]] == pytest.approx(PLAN.cpu_base * 0.5)  # ...the slow GPU stays


def test_cooling_is_accepted_for_real_and_stored_as_simulated() -> None:
    f = Fault(target="lab/r01/cdu", kind="coolant_flow_low", severity=0.5)
    check_real(f)
    assert "simulated" in injector._as_dict(f)["simulated"]
    flap = Fault(target="lab/r01/cdu", kind="flapping", of="coolant_flow_low", severity=0.5,
                 duty=0.5)
    check_real(flap)
    assert injector._as_dict(flap)["simulated"] == injector.SIMULATED_FLOW
    assert "simulated" not in injector._as_dict(
        Fault(target=R01[0], kind="slow_gpu", severity=0.5))
