"""The ladder on the real lab through the real Slurm: one slurmd per tray under one
slurmctld, every rank an srun task entering its GPU's namespace and cgroup."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from lab_rig import FLEET, host_snapshot, lab_unavailable, left_behind, torch_missing
from lc_slurm_cluster import available, slurm_cluster

from rackscale import lab
from rackscale.certify import Ladder, LadderConfig
from rackscale.certify.runners import RunnerBackend, placement_from_places
from rackscale.certify.runners.base import host_rank_cap
from rackscale.certify.runners.slurm import SlurmRunner
from rackscale.certify.verdict import SHARED_CPU_THRESHOLDS
from rackscale.faults import Fault
from rackscale.fleet import Topology, load_fleet, slurm_node_name

_why = lab_unavailable() or torch_missing() or available()
pytestmark = [pytest.mark.skipif(_why is not None, reason=str(_why)), pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Topology, Path, Path]]:
    before = host_snapshot()
    topo = Topology.build(load_fleet(FLEET))
    trays = sorted({topo.ids[int(t)] for t in topo.gpu_tray})
    sd = tmp_path_factory.mktemp("lab") / "state"
    st = lab.up(topo, sd, fleet_file=FLEET)
    try:
        with slurm_cluster(tmp_path_factory.mktemp("slurm"),
                           [slurm_node_name(t) for t in trays], cpus=2) as conf:
            old = os.environ.get("SLURM_CONF")
            os.environ["SLURM_CONF"] = str(conf)
            try:
                yield topo, sd, conf
            finally:
                if old is None:
                    os.environ.pop("SLURM_CONF")
                else:
                    os.environ["SLURM_CONF"] = old
    finally:
        lab.down(sd)
        assert left_behind(before, host_snapshot(), st.plan.lab_id) == {}


def _run(topo: Topology, sd: Path) -> list[tuple[str, str, str]]:
    st = lab.load_state(sd)
    assert st is not None
    placement = placement_from_places(lab.rank_places(st.plan), "lab")
    domain_of = {g: topo.domains[int(topo.gpu_domain[i])] for i, g in enumerate(topo.gpu_ids)}
    runner = SlurmRunner.from_environment(topo, placement, domain_of, concurrency=3,
                                          partition="test")
    # the slurmds share this host's cores: ranks in flight are capped like LocalRunner's
    assert runner.max_ranks == host_rank_cap(placement)
    try:
        cfg = LadderConfig(repeats=3, message_bytes=4 << 20,
                           thresholds=dict(SHARED_CPU_THRESHOLDS))
        run = Ladder(topo, RunnerBackend(topo, runner), cfg).run()
    finally:
        runner.close()
    print([(f.component, f.kind, f.evidence.get("rel"), f.evidence.get("error"))
           for f in run.findings])
    return sorted((f.component, f.kind, str(f.evidence.get("error", ""))) for f in run.findings)


def test_bad_cable_found_through_slurm(cluster: tuple[Topology, Path, Path]) -> None:
    topo, sd, _conf = cluster
    lab.inject(sd, [Fault(target="lab/r02/c02/nic1", kind="bad_cable", severity=0.3)])
    try:
        assert [(c, k) for c, k, _ in _run(topo, sd)] == [("lab/r02/c02/nic1", "bad_cable")]
    finally:
        lab.clear(sd)


def test_a_rank_slurm_cannot_start_is_a_fail_with_the_slurm_reason(
        cluster: tuple[Topology, Path, Path]) -> None:
    topo, sd, conf = cluster
    env = dict(os.environ, SLURM_CONF=str(conf))
    node = slurm_node_name("lab/r01/c02")
    subprocess.run(["scontrol", "update", f"nodename={node}", "state=drain",
                    "reason=rackscale-test-repair"], env=env, check=True)
    try:
        found = _run(topo, sd)
    finally:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], env=env,
                       check=True)
    # the tray's two ranks fail with Slurm's word for it; the campaign went on for the rest
    assert [(c, k) for c, k, _ in found] == [("lab/r01/c02/gpu0", "gpu_dead"),
                                             ("lab/r01/c02/gpu1", "gpu_dead")]
    assert all("rackscale-test-repair" in err and node in err for _, _, err in found)
