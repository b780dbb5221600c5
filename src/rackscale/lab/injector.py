"""Faults applied for real on the lab, from the faults file format (docs/formats.md).

  bad_cable               the NIC's veth shaped (both ends) to severity x its nominal rate
  nic_dead                the NIC's veth set down (its peer loses carrier)
  leaf_degraded/_down     every port of the leaf bridge (ranks' NICs, spine uplink) cut / down
  nvlink_port_down        the GPU's NVLink veth set down
  nvlink_switch_degraded  every port of the rack's NVLink bridge cut to severity
  nvlink_switch_down      every port of the rack's NVLink bridge down
  slow_gpu                the rank's cgroup CPU quota cut to severity x its share
  coolant_flow_low        every rank of the CDU's rack: CPU quota cut to the clock fraction
                          the twin's thermal model gives at flow = severity (SIMULATED flow)
  gpu_dead                the rank's cgroup admits no process (pids.max 0): it cannot start
  flapping                a timer process applies and lifts the flapped kind at its duty
Kinds with no real counterpart on one Linux host are refused, naming the twin.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rackscale.faults import COOLANT_FLOW_LOW, FAULT_KINDS, FLAPPING, SLOW_GPU, clock_fraction
from rackscale.fleet import id_name, parent_id
from rackscale.lab import system as sysops
from rackscale.lab.build import (
    LabError,
    cg_top,
    record_process,
    require_root,
    shape_all,
    stop_process,
)
from rackscale.lab.plan import NV_IF, SO_IF, LabPlan
from rackscale.lab.state import LabState, require_up

NOT_REAL = {
    "sdc": "wrong GEMM results need a GPU that corrupts its arithmetic",
    "hbm_degraded": "the ranks share the host's memory system; it cannot be slowed per rank",
    "power_shelf_down": "the lab has no power shelves",
}
# Stored with every coolant fault the lab applies: its flow is the fault's word, not a reading.
SIMULATED_FLOW = ("simulated: the lab has no liquid-cooling loop; the coolant flow is the "
                  "fault's severity and the ranks' clock follows the twin's thermal model")
CPU_KINDS = (SLOW_GPU, COOLANT_FLOW_LOW)  # the kinds that set a rank's CPU quota


class FaultLike(Protocol):
    """A fault of the faults file (`rackscale.faults.Fault` has these fields)."""

    # Read-only (properties), as the frozen `Fault`'s fields are.
    @property
    def target(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def severity(self) -> float | None: ...
    @property
    def of(self) -> str | None: ...
    @property
    def duty(self) -> float | None: ...
    @property
    def period_s(self) -> float | None: ...


def check_real(fault: FaultLike) -> None:
    kind = fault.of if fault.kind == FLAPPING and fault.of else fault.kind
    if kind not in FAULT_KINDS:
        raise LabError(f"unknown fault kind {kind!r}; valid kinds: {', '.join(FAULT_KINDS)}")
    if kind in NOT_REAL:
        raise LabError(f"{fault.target}: {kind} cannot be applied for real on the lab "
                       f"({NOT_REAL[kind]}). Fix: inject it on the digital twin instead "
                       "(`rackscale certify run --faults FILE`, the twin backend)")


def _rank_of(plan: LabPlan, target: str, field: str) -> Any:
    for r in plan.ranks:
        if getattr(r, field) == target:
            return r
    raise LabError(f"{target} is not a {field} of lab {plan.fleet}")


def _leaf_rates(plan: LabPlan, leaf: str) -> list[tuple[str, float]]:
    b = next((b for b in plan.bridges if b.id == leaf and b.role == "leaf"), None)
    if b is None:
        raise LabError(f"{leaf} is not a leaf of lab {plan.fleet}")
    ports = [(r.so_port, plan.so_mbit) for r in plan.ranks if r.leaf == leaf]
    return [*ports, (b.uplink or "", plan.uplink_mbit)]


def _domain_of(plan: LabPlan, switch: str) -> str:
    domain = plan.switch_domains.get(switch)
    if domain is None:
        raise LabError(f"{switch} is not an NVLink switch of lab {plan.fleet}")
    return domain


def _domain_rates(plan: LabPlan, switch: str) -> list[tuple[str, float]]:
    domain = _domain_of(plan, switch)
    return [(r.nv_port, plan.nv_mbit) for r in plan.ranks if r.domain == domain]


def _cdu_rack(plan: LabPlan, cdu: str) -> str:
    """The rack whose CDU `cdu` is (`<rack>/cdu`): a lab rack is one NVLink domain."""
    rack = parent_id(cdu)
    if id_name(cdu) != "cdu" or rack not in {r.domain for r in plan.ranks}:
        raise LabError(f"{cdu} is not the CDU of a rack of lab {plan.fleet} (give "
                       "<rack>/cdu, e.g. lab/r01/cdu)")
    return rack


def _affected(plan: LabPlan, kind: str, target: str) -> list[Any]:
    """The ranks whose CPU quota a fault of a CPU kind sets."""
    if kind == COOLANT_FLOW_LOW:
        rack = _cdu_rack(plan, target)
        return [r for r in plan.ranks if r.domain == rack]
    return [_rank_of(plan, target, "gpu")]


def cpu_limits(plan: LabPlan, faults: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Every rank's CPU quota (cores, by GPU id) under the steady `faults` (stored dicts):
    its share x each slow_gpu severity on its GPU x the clock fraction (`clock_fraction`,
    the twin's curve) of its rack's lowest coolant flow. The twin multiplies the same two
    factors, so a slow GPU in a hot rack is slower still, whichever came first. Flapping
    faults are left out: their timer sets the quota as they come and go."""
    factor = {r.gpu: 1.0 for r in plan.ranks}
    flow: dict[str, float] = {}
    for f in faults:
        sev = 1.0 if f.get("severity") is None else max(float(f["severity"]), 0.001)
        if f["kind"] == SLOW_GPU:
            factor[_rank_of(plan, f["target"], "gpu").gpu] *= sev
        elif f["kind"] == COOLANT_FLOW_LOW:
            rack = _cdu_rack(plan, f["target"])
            flow[rack] = min(flow.get(rack, 1.0), sev)
    return {r.gpu: plan.cpu_base * factor[r.gpu] * clock_fraction(flow.get(r.domain, 1.0))
            for r in plan.ranks}


def _set_cpu(plan: LabPlan, kind: str, target: str, severity: float | None, on: bool,
             others: Sequence[Mapping[str, Any]]) -> None:
    this = [{"kind": kind, "target": target, "severity": severity}] if on else []
    limits = cpu_limits(plan, [*(g for g in others if g["kind"] in CPU_KINDS), *this])
    cg = sysops.cgroups()
    for r in _affected(plan, kind, target):
        sysops.cg_set_cpu(cg, f"{cg_top(plan.lab_id)}/{r.cgroup}", limits[r.gpu])


def apply(plan: LabPlan, kind: str, target: str, severity: float | None, on: bool,
          others: Sequence[Mapping[str, Any]] = ()) -> None:
    """Set `kind` on `target` present (`on`) or lifted (back to nominal). `others`: the
    other faults present (stored dicts), which a CPU quota composes with (`cpu_limits`)."""
    fab = plan.fabric_ns
    sev = 1.0 if not on or severity is None else max(severity, 0.001)
    state = "up" if not on else "down"
    if kind == "bad_cable":
        r = _rank_of(plan, target, "nic")
        sysops.tc_batch(fab, [sysops.tbf(r.so_port, plan.so_mbit * sev)])
        sysops.tc_batch(r.netns, [sysops.tbf(SO_IF, plan.so_mbit * sev)])
    elif kind == "nic_dead":
        sysops.ip_batch(fab, [f"link set {_rank_of(plan, target, 'nic').so_port} {state}"])
    elif kind in ("leaf_degraded", "leaf_down"):
        ports = _leaf_rates(plan, target)
        if kind == "leaf_down":
            sysops.ip_batch(fab, [f"link set {p} {state}" for p, _ in ports])
        else:
            sysops.tc_batch(fab, [sysops.tbf(p, rate * sev) for p, rate in ports])
    elif kind == "nvlink_port_down":
        r = _rank_of(plan, target, "gpu")
        sysops.ip_batch(fab, [f"link set {r.nv_port} {state}"])
    elif kind in ("nvlink_switch_degraded", "nvlink_switch_down"):
        ports = _domain_rates(plan, target)
        if kind == "nvlink_switch_down":
            sysops.ip_batch(fab, [f"link set {p} {state}" for p, _ in ports])
        else:
            sysops.tc_batch(fab, [sysops.tbf(p, rate * sev) for p, rate in ports])
            domain = _domain_of(plan, target)
            for r in plan.ranks:
                if r.domain == domain:
                    sysops.tc_batch(r.netns, [sysops.tbf(NV_IF, plan.nv_mbit * sev)])
    elif kind in CPU_KINDS:
        _set_cpu(plan, kind, target, severity, on, others)
    elif kind == "gpu_dead":
        r = _rank_of(plan, target, "gpu")
        cg, name = sysops.cgroups(), f"{cg_top(plan.lab_id)}/{r.cgroup}"
        sysops.cg_set_pids(cg, name, 0 if on else None)
        if on:
            for pid in sysops.cg_procs(cg, name):
                sysops.kill(pid)  # a GPU that falls off the bus takes its running rank along
    else:
        raise LabError(f"{kind} has no real counterpart on the lab")


def _as_dict(f: FaultLike) -> dict[str, Any]:
    d = {"target": f.target, "kind": f.kind, "severity": f.severity, "of": f.of,
         "duty": f.duty, "period_s": f.period_s}
    if COOLANT_FLOW_LOW in (f.kind, f.of):
        d["simulated"] = SIMULATED_FLOW
    return d


def inject(state_dir: Path, faults: list[FaultLike]) -> list[dict[str, Any]]:
    """Apply `faults` (checked against the fleet by the caller) on top of those present."""
    st = _loaded(state_dir)
    for f in faults:
        check_real(f)
    plan = st.plan
    present = st.faults
    for f in faults:
        d = _as_dict(f)
        if f.kind == FLAPPING:
            present.append(d)
            st.set_faults(present)
            _start_flapper(st, len(present) - 1)
        else:
            apply(plan, f.kind, f.target, f.severity, on=True, others=present)
            present.append(d)
            st.set_faults(present)
    return present


def _start_flapper(st: LabState, index: int) -> None:
    plan = st.plan
    cg = sysops.cgroups()
    ctl = f"{cg_top(plan.lab_id)}/ctl"
    st.record([{"type": "cgroup", "name": ctl}])
    sysops.cg_make(cg, ctl)
    # The timer runs inside the lab's control cgroup, so `lab down` finds it even if this
    # process dies before its pid is recorded.
    dirs = " ".join(str(d) for d in cg.dirs(ctl))
    script = (f'for d in {dirs}; do echo $$ > "$d/cgroup.procs" || exit 97; done; '
              'exec "$@"')
    proc = subprocess.Popen(["sh", "-c", script, "flap", sys.executable, "-m",
                             "rackscale.lab.flap", str(st.path.parent), str(index)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    record_process(st, proc.pid, _timer(index))


def lift(state_dir: Path, index: int) -> dict[str, Any]:
    """Lift one present fault (`index` into the lab's list of faults, as `lab status` lists
    them) and leave the others in place: its flapping timer stopped, its part back at
    nominal, then every other fault applied again (a lifted leaf must not undo a bad cable on
    one of its ports). Returns the fault lifted."""
    st = _loaded(state_dir)
    present = st.faults
    if not 0 <= index < len(present):
        raise LabError(f"no fault {index} is present on the lab ({len(present)} present)")
    f = present.pop(index)
    plan = st.plan
    if f["kind"] == FLAPPING:
        for entry in st.resources:
            if entry["type"] == "process" and entry.get("what") == _timer(index):
                stop_process(entry)
                st.forget(entry)
        apply(plan, f["of"], f["target"], f["severity"], on=False, others=present)
    else:
        apply(plan, f["kind"], f["target"], f["severity"], on=False, others=present)
    # The timers of later faults are named by their index: renumbered with the list.
    for entry in st.data["resources"]:
        for j in range(index + 1, len(present) + 1):
            if entry["type"] == "process" and entry.get("what") == _timer(j):
                entry["what"] = _timer(j - 1)
                break
    st.set_faults(present)
    for k, g in enumerate(present):
        if g["kind"] != FLAPPING:
            apply(plan, g["kind"], g["target"], g["severity"], on=True,
                  others=present[:k] + present[k + 1:])
    return f


def _timer(index: int) -> str:
    return f"flapping timer for fault {index}"


def clear(state_dir: Path) -> int:
    """Lift every fault: timers stopped, every link back up at its nominal rate, every rank
    at its CPU share and able to start."""
    st = _loaded(state_dir)
    plan = st.plan
    for entry in st.resources:
        if entry["type"] == "process":
            stop_process(entry)
            st.forget(entry)
    n = len(st.faults)
    shape_all(plan)
    cmds = [f"link set {p} up" for r in plan.ranks for p in (r.so_port, r.nv_port)]
    cmds += [f"link set {b.uplink} up" for b in plan.bridges if b.uplink]
    sysops.ip_batch(plan.fabric_ns, cmds)
    cg = sysops.cgroups()
    for r in plan.ranks:
        name = f"{cg_top(plan.lab_id)}/{r.cgroup}"
        sysops.cg_set_cpu(cg, name, plan.cpu_base)
        sysops.cg_set_pids(cg, name, None)
    st.set_faults([])
    return n


def _loaded(state_dir: Path) -> LabState:
    require_root()
    return require_up(state_dir, "lab")
