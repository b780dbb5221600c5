"""`lab up` / `lab down` as root on real namespaces: everything built is what the plan says,
and nothing is left behind afterwards, also after `kill -9` of `lab up` midway."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lab_rig import FLEET, ROOT, cli, host_snapshot, lab_unavailable, left_behind

pytestmark = pytest.mark.skipif(lab_unavailable() is not None, reason=str(lab_unavailable()))


def _state(d: Path) -> dict:
    return json.loads((d / "lab-state.json").read_text())


def test_up_builds_the_plan_and_down_leaves_nothing(tmp_path: Path) -> None:
    before = host_snapshot()
    sd = tmp_path / "lab"
    p = cli("lab", "up", "--lab", str(sd), "--json")
    assert p.returncode == 0, p.stderr
    try:
        st = _state(sd)
        plan = st["plan"]
        assert st["status"] == "up"
        now = host_snapshot()
        lab_id = plan["lab_id"]
        # what this lab created: every change on the host but other labs' (a shared machine)
        created = left_behind(before, now, lab_id).get("netns", set())
        assert created == {plan["fabric_ns"], *(r["netns"] for r in plan["ranks"])}
        # the host's own network namespace gained no link and no address
        assert now["links"] == before["links"] and now["addrs"] == before["addrs"]
        r0 = plan["ranks"][0]
        addrs = subprocess.run(["ip", "-n", r0["netns"], "-o", "addr", "show"],
                               capture_output=True, text=True, check=True).stdout
        assert r0["so_addr"] in addrs and r0["nv_addr"] in addrs
        qd = subprocess.run(["tc", "-n", plan["fabric_ns"], "qdisc", "show", "dev",
                             r0["so_port"]], capture_output=True, text=True, check=True).stdout
        assert "tbf" in qd and "200Mbit" in qd
        # every bucket holds 10 ms of its rate: a qdisc timer that fires late (an idle vCPU
        # woken by the hypervisor) loses no link time; 1 ms buckets lost up to half a ring's
        qdiscs = json.loads(subprocess.run(["tc", "-j", "-n", plan["fabric_ns"], "qdisc",
                                            "show"], capture_output=True, text=True,
                                           check=True).stdout)
        tbfs = [q["options"] for q in qdiscs if q["kind"] == "tbf"]
        assert len(tbfs) == 2 * len(plan["ranks"]) + 2 * sum(
            1 for b in plan["bridges"] if b["uplink"])
        assert all(o["burst"] >= 0.010 * o["rate"] for o in tbfs), tbfs
        master = subprocess.run(["ip", "-n", plan["fabric_ns"], "-o", "link", "show",
                                 r0["so_port"]], capture_output=True, text=True).stdout
        assert "master L0" in master  # r01/c01/gpu0's NIC sits on leaf-rail0-0
        # jumbo frames end to end (rank NIC, leaf, uplinks, spine): with 1500-byte frames a
        # ring through the spine fell to ~0.74 of its shaped rate on a loaded 2-core host
        mtus = subprocess.run(["ip", "-n", plan["fabric_ns"], "-o", "link", "show"],
                              capture_output=True, text=True, check=True).stdout
        assert mtus.count("mtu 9000") == len(mtus.splitlines()) - 1  # all but lo
        inner = subprocess.run(["ip", "-n", r0["netns"], "-o", "link", "show", "so0"],
                               capture_output=True, text=True, check=True).stdout
        assert "mtu 9000" in inner
        assert left_behind(before, now, lab_id).get("cgroups")
        again = cli("lab", "up", "--lab", str(sd))
        assert again.returncode == 2 and "already recorded" in again.stderr
    finally:
        d = cli("lab", "down", "--lab", str(sd), "--json")
    assert d.returncode == 0, d.stderr
    assert left_behind(before, host_snapshot(), lab_id) == {}
    assert not (sd / "lab-state.json").exists()
    second = cli("lab", "down", "--lab", str(sd), "--json")  # idempotent
    assert second.returncode == 0 and json.loads(second.stdout)["removed"] == []


def test_kill_9_of_lab_up_midway_then_down_leaves_nothing(tmp_path: Path) -> None:
    before = host_snapshot()
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    caught = None
    for attempt in range(8):
        sd = tmp_path / f"lab{attempt}"
        proc = subprocess.Popen([sys.executable, "-m", "rackscale", "lab", "up", "--fleet",
                                 FLEET, "--lab", str(sd)], env=env, cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # kill it once something is recorded (the state file is whole at every moment)
        deadline = time.monotonic() + 60
        status, lab_id = None, None
        while time.monotonic() < deadline and proc.poll() is None:
            f = sd / "lab-state.json"
            if f.exists():
                st = json.loads(f.read_text())
                if len(st["resources"]) >= 2 + attempt * 6:
                    os.kill(proc.pid, signal.SIGKILL)
                    status, lab_id = st["status"], st["plan"]["lab_id"]
                    break
            time.sleep(0.001)
        proc.wait(timeout=30)
        d = cli("lab", "down", "--lab", str(sd))
        assert d.returncode == 0, d.stderr
        assert left_behind(before, host_snapshot(), lab_id) == {}, \
            f"left behind after kill at attempt {attempt}"
        if status == "building" and proc.returncode == -signal.SIGKILL:
            caught = attempt
            break
    assert caught is not None, "lab up always finished before it could be killed midway"
