"""topology.conf from the fleet, read by a real slurmctld (topology/tree) with one emulated
slurmd per tray: two NVL72 racks (36 nodes) and an HGX rack of two nodes, 38 slurmd in all.
The file is written by the real CLI (`rackscale fleet topology-conf`); Slurm must accept it,
list every NVLink domain with its nodes, and keep a `--switches=1` job inside one rack. Then
the lifecycle's sync rewrites it when the loaded fleet changes and reconfigures slurmctld."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_slurm_cluster import available, slurm_cluster

from rackscale.fleet import FleetSpec, Topology, load_fleet, rack_nodes, render_topology_conf
from rackscale.lifecycle import (
    ScontrolSlurm,
    TopologySync,
    enroll,
    topology_plugin,
    transition,
)
from rackscale.store import Store, load_topology

FULL = """name: topo-test
regions:
  - name: t
    racks: [{template: vr-nvl72, count: 2}, {template: hgx-h100, count: 1, nodes_per_rack: 2}]
"""
# The same fleet before its second NVL72 rack came: r02 is added by a later `fleet load`.
SMALL = """name: topo-test
regions:
  - name: t
    racks: [{template: vr-nvl72, names: [r01]}, {template: hgx-h100, names: [r03],
             nodes_per_rack: 2}]
"""


def _env(conf: Path) -> dict[str, str]:
    return dict(os.environ, SLURM_CONF=str(conf))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    why = available()
    if why:
        pytest.fail(f"cannot start the Slurm test cluster: {why}")
    root = tmp_path_factory.mktemp("slurm-topo")
    spec = root / "fleet.yaml"
    spec.write_text(FULL)
    topo = Topology.build(load_fleet(spec))
    out = subprocess.run([sys.executable, "-m", "rackscale", "fleet", "topology-conf",
                          "--fleet", str(spec), "--plugin", "tree"],
                         capture_output=True, text=True, check=True, timeout=120)
    (root / "topology.conf").write_text(out.stdout)
    nodes = [n for r in topo.racks for n in rack_nodes(topo, r)]
    with slurm_cluster(root, nodes, extra=["TopologyPlugin=topology/tree"]) as conf:
        yield conf, spec


def _topology(conf: Path) -> dict[str, dict[str, str]]:
    out = subprocess.run(["scontrol", "show", "topology"], capture_output=True, text=True,
                         check=True, env=_env(conf)).stdout
    switches = {}
    for line in out.splitlines():
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        if "SwitchName" in fields:
            switches[fields["SwitchName"]] = fields
    return switches


def _expand(hostlist: str, conf: Path) -> list[str]:
    out = subprocess.run(["scontrol", "show", "hostnames", hostlist], capture_output=True,
                         text=True, check=True, env=_env(conf)).stdout
    return out.split()


def test_slurmctld_lists_every_domain_with_its_trays(cluster: tuple[Path, Path]) -> None:
    conf, _ = cluster
    sw = _topology(conf)
    for rack in ("t-r01", "t-r02"):
        nodes = _expand(sw[rack]["Nodes"], conf)
        assert nodes == [f"{rack}-c{k:02d}" for k in range(1, 19)], sw[rack]
        assert sw[rack]["Level"] == "0"
    assert _expand(sw["t-r03"]["Nodes"], conf) == ["t-r03-n01", "t-r03-n02"]
    # Both NVL72 racks share leaf group 0 (2 racks per leaf); the HGX rack is in group 1.
    assert _expand(sw["t-leaf-0"]["Switches"], conf) == ["t-r01", "t-r02"]
    assert sw["t-leaf-0"]["Level"] == "1" and sw["t-spine"]["Level"] == "2"
    assert _expand(sw["t-spine"]["Switches"], conf) == ["t-leaf-0", "t-leaf-1"]


def test_a_switches_1_job_lands_on_one_racks_trays(cluster: tuple[Path, Path]) -> None:
    """With one tray of r01 drained, the first 18 idle nodes in node order are 17 of r01 and
    one of r02: a placement that ignored the topology would split the job over two domains."""
    conf, _ = cluster
    env = _env(conf)
    subprocess.run(["scontrol", "update", "nodename=t-r01-c05", "state=drain",
                    "reason=test: one tray out"], check=True, env=env)
    try:
        done = subprocess.run(["srun", "-N", "18", "--switches=1", "-t", "1", "printenv",
                               "SLURMD_NODENAME"], capture_output=True, text=True, env=env,
                              timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert sorted(done.stdout.split()) == [f"t-r02-c{k:02d}" for k in range(1, 19)]
        # The drained tray is still in the topology: a drain is a node state.
        assert "t-r01-c05" in _expand(_topology(conf)["t-r01"]["Nodes"], conf)
    finally:
        subprocess.run(["scontrol", "update", "nodename=t-r01-c05", "state=resume"],
                       check=True, env=env)


def test_the_lifecycle_keeps_topology_conf_in_step(cluster: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    conf, full_spec = cluster
    topo_conf = conf.parent / "topology.conf"
    assert topology_plugin(conf) == "tree"
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    small = tmp_path / "small.yaml"
    small.write_text(SMALL)
    load_topology(store, Topology.build(load_fleet(small)))
    sync = TopologySync(store, ScontrolSlurm(conf=str(conf)), str(conf))

    change = sync.sync()  # the fleet in the store lacks r02: the file loses it
    assert change is not None and change.written and change.racks == 2, change
    assert "t-r02" not in _topology(conf)
    assert sync.sync() is None  # nothing changed: no rewrite, no reconfigure
    before = topo_conf.stat().st_mtime_ns

    topo = Topology.build(load_fleet(full_spec))
    load_topology(store, topo)  # `fleet load` of the spec with the rack added
    enroll(store, topo, actor="test")
    change = sync.sync()
    assert change is not None and change.written and change.nodes == 38
    assert topo_conf.stat().st_mtime_ns != before
    assert topo_conf.read_text() == render_topology_conf(topo, "tree")
    assert _expand(_topology(conf)["t-r02"]["Nodes"], conf)[-1] == "t-r02-c18"
    assert sync.sync() is None

    # A rack the lifecycle retires leaves the topology (received -> retired is legal).
    transition(store, "t/r03", "retired", actor="test", reason="decommissioned")
    change = sync.sync()
    assert change is not None and change.written and change.nodes == 36
    assert "t-r03" not in _topology(conf)
    assert "t-r03" not in topo_conf.read_text()
    store.close()


def test_a_sites_own_topology_conf_is_left_alone(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nTopologyPlugin=topology/block # blocks\n")
    mine = tmp_path / "topology.conf"
    mine.write_text("SwitchName=s0 Nodes=n[1-4]\n")
    store = Store(f"sqlite:///{tmp_path / 's.db'}")
    load_topology(store, Topology.build(load_fleet_text(tmp_path, SMALL)))
    sync = TopologySync(store, ScontrolSlurm(conf=str(conf)), str(conf))
    assert sync.plugin == "block"
    change = sync.sync()
    assert change is not None and not change.written
    assert re.search(r"not written by rackscale", change.message)
    assert sync.sync() is None  # said once
    assert mine.read_text() == "SwitchName=s0 Nodes=n[1-4]\n"
    store.close()


def load_fleet_text(where: Path, text: str) -> FleetSpec:
    path = where / "fleet.yaml"
    path.write_text(text)
    return load_fleet(path)
