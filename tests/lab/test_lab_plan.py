"""The lab's plan (pure data, no root): names, addresses, rates from the template, refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lab_rig import FLEET, ROOT

from rackscale.faults import Fault
from rackscale.fleet import GPUS, NICS, Topology, load_fleet, parse_fleet
from rackscale.lab import NOT_REAL, LabError, LabPlanError, check_real, make_plan


def _fleet(racks: int, per_leaf: int) -> Topology:
    return Topology.build(parse_fleet(
        f"name: lab-{racks}\nregions:\n  - name: lab\n    racks: [{{template: lab-mini, "
        f"count: {racks}}}]\nnetwork: {{racks_per_leaf: {per_leaf}, spines_per_region: 1}}\n"))


@settings(max_examples=25, deadline=None)
@given(racks=st.integers(1, 8), per_leaf=st.integers(1, 3),
       lab_id=st.text("0123456789abcdef", min_size=4, max_size=4))
def test_plan_is_consistent_for_any_small_fleet(racks: int, per_leaf: int, lab_id: str) -> None:
    topo = _fleet(racks, per_leaf)
    plan = make_plan(topo, lab_id)
    assert [r.gpu for r in plan.ranks] == topo.gpu_ids
    # every interface name fits the kernel's 15 characters; names and addresses are unique
    names = [n for r in plan.ranks for n in (r.so_port, r.nv_port)]
    names += [b.name for b in plan.bridges] + [x for b in plan.bridges
                                               for x in (b.uplink, b.spine_end) if x]
    assert len(names) == len(set(names)) and max(map(len, names)) <= 15
    addrs = [a for r in plan.ranks for a in (r.so_addr, r.nv_addr)]
    assert len(addrs) == len(set(addrs))
    assert all(r.netns.startswith(f"rsl-{lab_id}-") for r in plan.ranks)
    # each rank's NIC is on its rail's leaf, its NVLink on its own rack's bridge
    for i, r in enumerate(plan.ranks):
        assert r.leaf == topo.leaves[int(topo.gpu_leaf[i])]
        assert r.nic == topo.ids[int(topo.gpu_nic[i])]
        assert r.domain == topo.racks[int(topo.gpu_rack[i])].id
    leaves = [b for b in plan.bridges if b.role == "leaf"]
    assert len(leaves) == len(topo.leaves) and all(b.uplink for b in leaves)
    # every NVLink switch tray maps to the domain whose GPUs it joins (the injector's map)
    switches = [topo.ids[i] for i in range(len(topo.ids)) if topo.kinds[i] == "switch_tray"]
    assert sorted(plan.switch_domains) == sorted(switches) and switches
    for sw, dom in plan.switch_domains.items():
        gpus = topo.affected_gpus(sw)
        assert {plan.ranks[g].domain for g in gpus.tolist()} == {dom}


def test_rates_come_from_the_template_skus() -> None:
    topo = Topology.build(load_fleet(FLEET))
    plan = make_plan(topo, "abcd")
    t = topo.racks[0].template
    assert plan.so_mbit == pytest.approx(NICS[t.nic].gbit_s * 1000)
    assert plan.nv_mbit == pytest.approx(GPUS[t.gpu].nvlink_gbps / 2 * 8000)
    assert plan.uplink_mbit == pytest.approx(plan.so_mbit * 2)  # 2 ranks per leaf


def test_plan_refuses_non_lab_fleets(seed_topo: Topology) -> None:
    with pytest.raises(LabPlanError, match="at most 64 ranks"):
        make_plan(seed_topo, "abcd")


@pytest.mark.parametrize("kind", sorted(NOT_REAL))
def test_kinds_that_cannot_be_real_are_refused_naming_the_twin(kind: str) -> None:
    target = {"coolant_flow_low": "lab/r01/cdu", "power_shelf_down": "lab/r01/ps1"}.get(
        kind, "lab/r01/c01/gpu0")
    sev = 0.5 if kind in ("hbm_degraded", "coolant_flow_low") else None
    with pytest.raises(LabError, match="digital twin"):
        check_real(Fault(target=target, kind=kind, severity=sev))
    flapping = Fault(target=target, kind="flapping", of=kind, severity=sev, duty=0.5)
    with pytest.raises(LabError, match="digital twin"):
        check_real(flapping)


def test_real_kinds_pass_the_check() -> None:
    check_real(Fault(target="lab/r01/c01/nic0", kind="bad_cable", severity=0.3))
    check_real(Fault(target="lab/r01/c01/nic0", kind="flapping", of="bad_cable",
                     severity=0.2, duty=0.5, period_s=2.0))


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to an unprivileged user")
def test_lab_up_without_root_refuses_and_says_why(tmp_path) -> None:
    env = os.environ | {"PYTHONPATH": str(ROOT / "src"), "HOME": str(tmp_path)}
    os.chmod(tmp_path, 0o777)
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        sys.executable, "-m", "rackscale", "lab", "up", "--lab",
                        str(tmp_path / "st")], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "needs root" in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "st").exists()
