"""Slurm's own hook: slurmd runs `rackscale telemetry health-check` as its HealthCheckProgram
(every 2 s here) on each of four emulated nodes; each reads the exporter page (a real HTTP
server) for its own GPUs. When the page shows an Xid 79 on one node's GPU, that node's tray is
triaged on the recorded finding and the node drained through the lifecycle, with the reason
the controller resumes once the tray is re-certified; the other nodes stay idle, and the
checks that follow record nothing twice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lc_slurm_cluster import available, slurm_cluster
from tests.telemetry.conftest import Exporter, exporter  # noqa: F401 (the fixture)
from tests.telemetry.pages import page

from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology, slurm_node_name
from rackscale.lifecycle import REASON_PREFIX, enroll, state_of, transition
from rackscale.store import Kind, Store, load_topology

SRC = Path(__file__).resolve().parents[2] / "src"
SPEC = FleetSpec(name="hc", regions=[
    RegionSpec(name="east", racks=[RackGroup(template="lab-mini", count=2)])])
SICK = "east/r01/c02"


def _sinfo(conf: Path) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, SLURM_CONF=str(conf)))
    return {n: (st.rstrip("*"), why) for n, st, why in (
        line.split("|", 2) for line in out.stdout.splitlines())}


def test_health_check_drains_a_failing_node_through_the_lifecycle(
        exporter: Exporter, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    why = available()
    if why:
        pytest.fail(f"cannot start the Slurm test cluster: {why}")
    db = f"sqlite:///{tmp_path / 'hc.db'}"
    store = Store(db)
    topo = Topology.build(SPEC)
    load_topology(store, topo)
    enroll(store, topo, actor="test")
    trays = [t for r in topo.racks for t in topo.tray_of_gpus().values() if t.startswith(r.id)]
    trays = sorted(set(trays))
    for tray in trays:
        for to in ("seatrial", "burn_in"):
            transition(store, tray, to, actor="test", reason="bring-up")
        store.append_event(tray, Kind.CERTIFY_RESULT, {"run_id": "c1", "backend": "twin",
                                                       "verdict": "pass"})
        transition(store, tray, "production", actor="test", reason="certified")
    nodes = [slurm_node_name(t) for t in trays]
    healthy = {n: {0: {}, 1: {}} for n in nodes}
    exporter.pages["/metrics"] = page(healthy)
    root = tmp_path / "slurm"
    root.mkdir()
    # slurmd runs the program with almost no environment (no PATH): every path is absolute.
    script = root / "health-check.sh"
    script.write_text(
        f"#!/bin/sh\nPYTHONPATH={SRC} exec {sys.executable} -m rackscale telemetry "
        f"health-check --dcgm {exporter.url}/metrics --db {db} --slurm-conf {root}/slurm.conf "
        f"--json >> {root}/health-$SLURMD_NODENAME.log 2>&1\n")
    script.chmod(0o755)
    extra = [f"HealthCheckProgram={script}", "HealthCheckInterval=2",
             "HealthCheckNodeState=ANY"]
    with slurm_cluster(root, nodes, extra=extra) as conf:
        sick = {**healthy, slurm_node_name(SICK): {0: {}, 1: {"DCGM_FI_DEV_XID_ERRORS": 79}}}
        exporter.pages["/metrics"] = page(sick)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and _sinfo(conf)[slurm_node_name(SICK)][0] not in (
                "drained", "draining"):
            time.sleep(0.5)
        info = _sinfo(conf)
        logs = (root / f"health-{slurm_node_name(SICK)}.log").read_text()[-6000:]
        assert info[slurm_node_name(SICK)] == ("drained", f"{REASON_PREFIX}tray triage"), logs
        assert all(info[n][0] == "idle" for n in nodes if n != slurm_node_name(SICK)), info
        time.sleep(5)  # two more rounds of checks on every node
        findings = store.events(kind=Kind.CERTIFY_FINDING)
    assert [(e.component_id, e.payload["kind"]) for e in findings] == \
        [(f"{SICK}/gpu1", "gpu_dead")]
    assert state_of(store, SICK).state == "triage"
    moved = store.events(component_id=SICK, kind=Kind.LIFECYCLE_TRANSITION)[-1]
    assert moved.payload["finding_seq"] == findings[0].seq and moved.actor == "health-check"
    drains = store.events(component_id=SICK, kind=Kind.LIFECYCLE_SLURM)
    assert [(e.payload["action"], e.actor) for e in drains] == [("drain", "health-check")]
    store.close()
