"""`lab up` and `lab down`: build the miniature cluster from its plan, and remove exactly
what the state file recorded (by name and id, never by pattern). Both are idempotent; `down`
also works after `up` was killed midway, because every resource is recorded before it is
created and removal tolerates what never came to exist."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.lab import system as sysops
from rackscale.lab.plan import NV_IF, SO_IF, LabPlan, make_plan
from rackscale.lab.state import REMOVAL_ORDER, LabState


class LabError(UserError):
    pass


STANDBY_CGROUP = "standby"


def cg_top(lab_id: str) -> str:
    return f"rackscale-lab-{lab_id}"


def require_root() -> None:
    reason = sysops.why_not_here()
    if reason:
        raise LabError(f"cannot build the lab here: {reason}")


def up(topo: Topology, state_dir: Path, *, fleet_file: str | None,
       on_step: Any = None) -> LabState:
    """Build the lab for `topo` (refuses when one is already recorded in `state_dir`)."""
    require_root()
    old = LabState.load(state_dir)
    if old is not None:
        raise LabError(f"a lab ({old.plan.lab_id}, {old.status}) is already recorded in "
                       f"{old.path}. Fix: `rackscale lab down` first")
    existing = sysops.netns_list()
    lab_id = secrets.token_hex(2)
    while any(n.startswith(f"rsl-{lab_id}-") for n in existing):
        lab_id = secrets.token_hex(2)
    plan = make_plan(topo, lab_id)
    st = LabState.new(state_dir, plan, fleet_file)
    steps = (("namespaces", _namespaces), ("bridges", _bridges), ("rank links", _rank_links),
             ("addresses", _addresses), ("shaping", _shape), ("cgroups", _cgroups))
    for name, step in steps:
        if on_step:
            on_step(name)
        step(st, plan)
    st.set_status("up")
    return st


def _namespaces(st: LabState, plan: LabPlan) -> None:
    names = [plan.fabric_ns, *(r.netns for r in plan.ranks)]
    st.record([{"type": "netns", "name": n} for n in names])
    have = sysops.netns_list()
    for n in names:
        if n not in have:
            sysops.run(["ip", "netns", "add", n])
    sysops.ip_batch(plan.fabric_ns, ["link set lo up"])


def _bridges(st: LabState, plan: LabPlan) -> None:
    fab = plan.fabric_ns
    entries = []
    cmds = []
    for b in plan.bridges:
        entries.append({"type": "link", "ns": fab, "name": b.name})
        cmds.append(f"link add {b.name} mtu {sysops.MTU} type bridge stp_state 0 "
                    "forward_delay 0")
    for b in plan.bridges:
        if b.uplink:
            entries.append({"type": "link", "ns": fab, "name": b.uplink})
            cmds += [f"link add {b.uplink} mtu {sysops.MTU} type veth peer name "
                     f"{b.spine_end} mtu {sysops.MTU}",
                     f"link set {b.uplink} master {b.name}",
                     f"link set {b.spine_end} master {b.spine}",
                     f"link set {b.uplink} up", f"link set {b.spine_end} up"]
    cmds += [f"link set {b.name} up" for b in plan.bridges]
    st.record(entries)
    sysops.ip_batch(fab, cmds)


def _rank_links(st: LabState, plan: LabPlan) -> None:
    fab = plan.fabric_ns
    bridge_of = {b.id: b.name for b in plan.bridges}
    st.record([{"type": "link", "ns": fab, "name": p} for r in plan.ranks
               for p in (r.so_port, r.nv_port)])
    cmds = []
    for r in plan.ranks:
        switch = f"{r.domain}/s01"
        mtu = sysops.MTU
        cmds += [f"link add {r.so_port} mtu {mtu} type veth peer name {SO_IF} mtu {mtu} "
                 f"netns {r.netns}",
                 f"link add {r.nv_port} mtu {mtu} type veth peer name {NV_IF} mtu {mtu} "
                 f"netns {r.netns}",
                 f"link set {r.so_port} master {bridge_of[r.leaf]}",
                 f"link set {r.nv_port} master {bridge_of[switch]}",
                 f"link set {r.so_port} up", f"link set {r.nv_port} up"]
    sysops.ip_batch(fab, cmds)


def _addresses(st: LabState, plan: LabPlan) -> None:
    # Addresses exist only inside the rank namespaces: the host's network is never touched.
    for r in plan.ranks:
        sysops.ip_batch(r.netns, ["link set lo up", f"addr add {r.so_addr}/16 dev {SO_IF}",
                                  f"addr add {r.nv_addr}/16 dev {NV_IF}",
                                  f"link set {SO_IF} up", f"link set {NV_IF} up"])
        # Collectives send in bursts with pauses between steps; TCP must not fall back to
        # slow start after each pause, or small messages never reach the shaped rate.
        sysops.run(["ip", "netns", "exec", r.netns, "sysctl", "-qw",
                    "net.ipv4.tcp_slow_start_after_idle=0"])


def _shape(st: LabState, plan: LabPlan) -> None:
    shape_all(plan)


def shape_all(plan: LabPlan) -> None:
    """Every link at its nominal rate, both directions (clears rate faults)."""
    fab = []
    for r in plan.ranks:
        fab += [sysops.tbf(r.so_port, plan.so_mbit), sysops.tbf(r.nv_port, plan.nv_mbit)]
        sysops.tc_batch(r.netns, [sysops.tbf(SO_IF, plan.so_mbit),
                                  sysops.tbf(NV_IF, plan.nv_mbit)])
    for b in plan.bridges:
        if b.uplink:
            fab += [sysops.tbf(b.uplink, plan.uplink_mbit),
                    sysops.tbf(b.spine_end or "", plan.uplink_mbit)]
    sysops.tc_batch(plan.fabric_ns, fab)


def _cgroups(st: LabState, plan: LabPlan) -> None:
    cg = sysops.cgroups()
    top = cg_top(plan.lab_id)
    st.record([{"type": "cgroup", "name": top}]
              + [{"type": "cgroup", "name": f"{top}/{r.cgroup}"} for r in plan.ranks]
              + [{"type": "cgroup", "name": f"{top}/{STANDBY_CGROUP}"}])
    sysops.cg_make(cg, top)
    # The lab's ranks use at most their quotas (a runner keeps ~3 busy at once); a high weight
    # makes sure they get them on a loaded host, so figures measure links, not neighbours.
    sysops.cg_set_weight(cg, top, 16)
    for r in plan.ranks:
        sysops.cg_make(cg, f"{top}/{r.cgroup}")
        sysops.cg_set_cpu(cg, f"{top}/{r.cgroup}", plan.cpu_base)
    # A job's warm standbys wait here, not in their slot's cgroup: a rank's quota stands for
    # its GPU, and a standby's start-up is host CPU on real hardware, never the GPU's. The
    # lowest weight leaves the ranks the CPU they want; a standby joins its slot's cgroup
    # when its rank arrives (recovery/warm.py).
    sysops.cg_make(cg, f"{top}/{STANDBY_CGROUP}")
    sysops.cg_set_weight(cg, f"{top}/{STANDBY_CGROUP}", 1)


def record_process(st: LabState, pid: int, what: str) -> dict[str, Any]:
    entry = {"type": "process", "pid": pid, "start": sysops.proc_start_time(pid), "what": what}
    st.record([entry])
    return entry


def stop_process(entry: dict[str, Any]) -> None:
    """Kill a recorded process only if it is still the same one (pid and start time)."""
    pid = int(entry["pid"])
    if entry.get("start") and sysops.proc_start_time(pid) == entry["start"]:
        sysops.kill(pid)
        for _ in range(100):
            if sysops.proc_start_time(pid) != entry["start"]:
                break
            time.sleep(0.02)


def down(state_dir: Path) -> list[str]:
    """Remove everything the lab recorded; returns what was removed. No state: nothing to do."""
    st = LabState.load(state_dir)
    if st is None:
        return []
    require_root()
    st.set_status("removing")
    removed: list[str] = []
    res = st.resources
    have_ns = sysops.netns_list()
    cg = None
    for kind in REMOVAL_ORDER:
        for entry in reversed([r for r in res if r["type"] == kind]):
            if kind == "process":
                stop_process(entry)
                removed.append(f"process {entry['pid']} ({entry.get('what')})")
            elif kind == "cgroup":
                cg = cg or sysops.cgroups()
                sysops.cg_remove(cg, entry["name"])
                removed.append(f"cgroup {entry['name']}")
            elif kind == "link":
                if entry["ns"] in have_ns and entry["name"] in sysops.links(entry["ns"]):
                    sysops.run(["ip", "-n", entry["ns"], "link", "del", entry["name"]])
                removed.append(f"link {entry['name']} in {entry['ns']}")
            elif kind == "netns":
                if entry["name"] in have_ns:
                    for pid in sysops.netns_pids(entry["name"]):
                        sysops.kill(pid)  # a rank left running inside the lab's namespace
                    sysops.run(["ip", "netns", "del", entry["name"]])
                removed.append(f"netns {entry['name']}")
            st.forget(entry)
    st.remove()
    return removed


def status(state_dir: Path) -> dict[str, Any] | None:
    st = LabState.load(state_dir)
    if st is None:
        return None
    plan = st.plan
    have = sysops.netns_list() if sysops.why_not_here() is None else set()
    missing = [r["name"] for r in st.resources if r["type"] == "netns" and r["name"] not in have]
    return {
        "lab_id": plan.lab_id, "fleet": plan.fleet, "status": st.status, "state": str(st.path),
        "ranks": len(plan.ranks), "namespaces": sum(r["type"] == "netns" for r in st.resources),
        "links": sum(r["type"] == "link" for r in st.resources),
        "cgroups": sum(r["type"] == "cgroup" for r in st.resources),
        "processes": sum(r["type"] == "process" for r in st.resources),
        "missing_namespaces": missing,
        "rates_mbit": {"scale_out": plan.so_mbit, "nvlink": plan.nv_mbit,
                       "uplink": plan.uplink_mbit},
        "cpu_per_rank": plan.cpu_base, "faults": st.faults,
    }
