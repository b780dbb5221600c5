"""Slurm drain/resume against a real slurmctld with emulated slurmd nodes on this machine."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_rig import Rig, small_spec
from lc_slurm_cluster import available, slurm_cluster

from rackscale.lifecycle import ScontrolSlurm, node_name, set_goal, state_of, transition

RACK = "b/r01"
TRAYS = [f"{RACK}/c0{k}" for k in (1, 2, 3)]


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    why = available()
    if why:
        # `make test` installs slurm-wlm and munge, so a missing one is a broken setup.
        pytest.fail(f"cannot start the Slurm test cluster: {why}")
    with slurm_cluster(tmp_path_factory.mktemp("slurm"), [node_name(t) for t in TRAYS]) as conf:
        yield conf


def _sinfo(conf: Path) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, SLURM_CONF=str(conf)))
    # A resumed node shows `idle*` for a moment until slurmctld's ping comes back; the `*`
    # (not responding) is about the ping, not the drain state under test.
    return {n: (st.rstrip("*"), reason) for n, st, reason in (
        line.split("|", 2) for line in out.stdout.splitlines())}


def test_drain_and_resume_in_real_slurm(slurm_conf: Path, tmp_path: Path) -> None:
    rig = Rig(f"sqlite:///{tmp_path / 's.db'}", small_spec(None))
    rig.ctl.slurm = ScontrolSlurm(conf=str(slurm_conf))
    names = [node_name(t) for t in TRAYS]
    assert node_name(TRAYS[0]) == "b-r01-c01"

    # Bring the rack to production with evidence; trays enter production and are resumed.
    set_goal(rig.store, [RACK], "burn_in")
    rig.ctl.run(until_idle=True, max_passes=50)
    # Nodes not in production are drained on the first pass that sees them.
    info = _sinfo(slurm_conf)
    assert all(info[n][0] in ("drained", "draining") for n in names), info
    assert info[names[0]][1].startswith("rackscale: ")
    rig.store.append_event(RACK, "certify.result", {"run_id": "t", "backend": "twin",
                                                    "verdict": "pass"})
    set_goal(rig.store, [RACK], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    assert state_of(rig.store, RACK).state == "production"
    # the controller promotes the trays on the rack's passing result
    assert {state_of(rig.store, t).state for t in TRAYS} == {"production"}
    rig.ctl.reconcile()
    info = _sinfo(slurm_conf)
    assert all(info[n][0] == "idle" for n in names), info

    # A tray leaves production -> drained with the reason; the rest keep serving.
    transition(rig.store, TRAYS[1], "triage", actor="test", reason="xid 79")
    rep = rig.ctl.reconcile()
    assert rep.slurm == 1
    info = _sinfo(slurm_conf)
    assert info[names[1]] == ("drained", "rackscale: tray triage"), info
    assert info[names[0]][0] == "idle" and info[names[2]][0] == "idle"
    assert rig.ctl.reconcile().slurm == 0  # idempotent

    # An operator's own drain is never undone by rackscale.
    subprocess.run(["scontrol", "update", f"nodename={names[2]}", "state=drain",
                    "reason=site maintenance"], check=True,
                   env=dict(os.environ, SLURM_CONF=str(slurm_conf)))
    # Back through repair and re-certification -> resumed.
    transition(rig.store, TRAYS[1], "repair", actor="test", reason="reseated")
    transition(rig.store, TRAYS[1], "burn_in", actor="test", reason="retest")
    rig.store.append_event(TRAYS[1], "certify.result", {"run_id": "t2", "backend": "twin",
                                                        "verdict": "pass"})
    transition(rig.store, TRAYS[1], "production", actor="test", reason="re-certified")
    rig.ctl.reconcile()
    info = _sinfo(slurm_conf)
    assert info[names[1]][0] == "idle", info
    assert info[names[2]] == ("drained", "site maintenance"), info
    kinds = [e.payload["action"] for e in rig.store.events(component_id=TRAYS[1],
                                                           kind="lifecycle.slurm")]
    assert kinds == ["drain", "resume", "drain", "resume"]
