"""The fleet around a soak's job, as an operator's tools would run it: the lab's racks in the
lifecycle (the soak's store), a simulated plant (power shelves and CDU readings: the lab has
no power or cooling hardware, so both are simulated and say so), the lifecycle controller
passing every few seconds, and certification on the lab before anything serves and after
every repair.

- Before the job: the lab is certified (`certify run --backend real --lab`), and the
  controller walks every rack to production on that evidence.
- A cooling fault sets its rack's CDU flow in the plant; the controller's coolant interlock
  sees the reading and steps through its tiers (warn, cap, drain, power off); the job's
  supervisor reads the rack's response from the lifecycle and leaves a drained rack.
- After a fault is lifted, its part's tray (a rack, for cooling) is certified again with
  `certify run --scope`, in the background; a rack the response powered off is walked back to
  production (it needs that newer evidence). On a pass, the job's slots there go back to it
  as spares (recovery/returns.py) once the lifecycle serves them again (tray in production
  on a serving rack), not before: the job and the lifecycle tell one story about a slot.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale import owned
from rackscale.errors import UserError
from rackscale.fleet import Topology, is_within
from rackscale.lifecycle import (
    Controller,
    RackState,
    SimCoolingDriver,
    SimPlant,
    SimPowerDriver,
    coolant_conditions,
    set_goal,
    state_of,
)
from rackscale.recovery import JobState, request_return
from rackscale.state import serves
from rackscale.store import Store

PERIOD_S = 2.0  # the controller's pass cadence during the soak
CERTIFY_REPEATS = 3  # samples per certification test (a rack takes ~12 s on the 2-core host)
CERTIFY_TIMEOUT_S = 300.0
BRING_UP_PASSES = 40
PLANT_BASIS = ("simulated: the lab has no power shelves or coolant loop; the plant's power "
               "and CDU flow are the lifecycle's simulated plant, set by the soak's faults")

Log = Callable[..., None]  # Log.write(kind, **fields) of run.py


class SoakFleetError(UserError):
    pass


@dataclass(frozen=True, slots=True)
class Queued:
    """A repaired part's scope waiting to be certified, and the faults it answers for."""

    scope: str
    indices: tuple[int, ...]


@dataclass(slots=True)
class Recert:
    """A certification of a repaired part's scope, running in the background."""

    indices: tuple[int, ...]  # the schedule's faults it answers for
    scope: str  # a tray or a rack
    proc: subprocess.Popen[bytes]
    out: Path
    started: float
    # the job's exclusions when it started: only those can its evidence bring back (a slot
    # excluded later, e.g. for its rack's cooling, needs evidence from after that)
    excluded: frozenset[str]


@dataclass(slots=True)
class Release:
    """Slots a passing certification may give back to the job, waiting until the lifecycle
    serves them (their tray in production on a serving rack): the supervisor and the
    lifecycle never disagree about a slot."""

    slots: list[str]
    evidence: dict[str, Any]
    since: float
    said: bool = False  # the wait was logged


@dataclass(slots=True)
class SoakFleet:
    lab_dir: Path
    fleet_file: str  # the lab's fleet spec, which each certification is given
    out: Path
    db: str
    topo: Topology
    log: Log
    store: Store = field(init=False)
    plant: SimPlant = field(init=False)
    ctl: Controller = field(init=False)
    queued: list[Queued] = field(default_factory=list)
    running: list[Recert] = field(default_factory=list)
    results: dict[int, dict[str, Any]] = field(default_factory=dict)  # fault -> recert
    releases: list[Release] = field(default_factory=list)
    states: dict[str, str] = field(default_factory=dict)  # rack -> its state last logged
    transitions: list[dict[str, Any]] = field(default_factory=list)
    last_pass: float = 0.0
    last_poll: float = 0.0

    def __post_init__(self) -> None:
        self.store = Store(self.db)
        self.plant = SimPlant.for_topology(self.topo, path=self.out / "plant.json")
        self.ctl = Controller(self.store, self.topo, SimPowerDriver(self.plant),
                              SimCoolingDriver(self.plant), actor="soak")

    # --- before the job -----------------------------------------------------------------------
    def bring_up(self) -> None:
        """Certify the lab, then walk every rack to production on that evidence."""
        self.ctl.enroll()
        ids = [r.id for r in self.topo.racks]
        set_goal(self.store, ids, RackState.PRODUCTION.value)
        res = self._certify_now(None, self.out / "certify-bring-up")
        if not res["passed"]:
            # Nothing is injected yet: a finding now is a lab left broken or one measurement
            # the loaded host bent (a clean veth measured flapping under a full test suite).
            # It must show again before the soak refuses; the newer evidence is what counts.
            self.log("bring_up_retest", first=res)
            res = self._certify_now(None, self.out / "certify-bring-up-retest")
        if not res["passed"]:
            raise SoakFleetError(f"the lab did not certify clean before the soak "
                                 f"({res['why']}); see {res['out']}. Fix the lab first "
                                 "(`rackscale lab status`, `lab clear`)")
        self.ctl.run(max_passes=BRING_UP_PASSES, until_idle=True)
        self.pass_now(force=True)
        off = {r: s for r, s in self.states.items() if s != RackState.PRODUCTION}
        if off:
            raise SoakFleetError(f"rack(s) not in production after certification: "
                                 f"{', '.join(f'{r} ({s})' for r, s in sorted(off.items()))}"
                                 f"; `rackscale lifecycle status --db {self.store.safe_url}`")

    # --- while the job runs -------------------------------------------------------------------
    def pass_now(self, *, force: bool = False) -> None:
        """One controller pass when one is due; log each rack state change."""
        now = time.time()
        if not force and now - self.last_pass < PERIOD_S:
            return
        self.last_pass = now
        rep = self.ctl.reconcile()
        for rid, err in rep.errors.items():
            self.log("lifecycle_error", rack=rid, error=err)
        for rack in self.topo.racks:
            st = state_of(self.store, rack.id).state
            if self.states.get(rack.id) != st:
                row = {"rack": rack.id, "from": self.states.get(rack.id), "to": st, "t": now}
                self.states[rack.id] = st
                self.transitions.append(row)
                self.log("lifecycle", **row)

    def cooling(self, rack: str, flow_fraction: float) -> dict[str, Any]:
        """The rack's CDU now reads `flow_fraction` of the flow the rack needs (simulated)."""
        need = self.ctl.racks[rack].required_flow_lpm
        self.plant.set_flow(rack, round(need * flow_fraction, 4))
        return {"rack": rack, "flow_lpm": self.plant.flow_lpm[rack],
                "required_lpm": round(need, 4), "basis": PLANT_BASIS}

    def restore(self, rack: str) -> None:
        self.plant.set_flow(rack, None)

    def recertify(self, index: int, scope: str) -> None:
        """After a repair: certify `scope` once nothing stands in its way (`poll`). A rack's
        certification covers the trays in it still waiting: they are certified with it."""
        covered = [q for q in self.queued if is_within(q.scope, scope)]
        if covered:
            self.queued = [q for q in self.queued if q not in covered]
        indices = (*sorted({i for q in covered for i in q.indices}), index)
        self.queued.append(Queued(scope=scope, indices=indices))
        self.log("recertify_queued", index=index, scope=scope,
                 covers=[q.scope for q in covered])

    def poll(self, job_dir: Path) -> None:
        """Collect finished certifications (a pass returns to the job, as spares, its slots
        in the scope that were already excluded when the certification started), then start
        those now free to run."""
        now = time.time()
        if now - self.last_poll < 1.0:  # a second is soon enough for a repair
            return
        self.last_poll = now
        st = JobState.load(job_dir)
        for rc in list(self.running):
            if rc.proc.poll() is None and time.time() - rc.started < CERTIFY_TIMEOUT_S:
                continue
            self.running.remove(rc)
            res = self._finish(rc.proc, rc.out)
            back = [s for s in (st.excluded if st else {})
                    if s in rc.excluded and is_within(s, rc.scope)]
            if res["passed"] and back:
                self.releases.append(Release(back, {"certify_run": res["run_id"],
                                                    "scope": rc.scope}, time.time()))
            res |= {"scope": rc.scope, "returned": back if res["passed"] else [],
                    "took_s": round(time.time() - rc.started, 3)}
            for i in rc.indices:
                self.results[i] = res
            self.log("recertified", indices=list(rc.indices), **res)
        self._release(job_dir)
        for q in list(self.queued):
            why = self._busy(q.scope, st)
            if why is None:
                self.queued.remove(q)
                self._begin(q, st)

    def _release(self, job_dir: Path) -> None:
        """Give back each waiting slot the lifecycle now serves."""
        if not self.releases:
            return

        def state(cid: str | None) -> str | None:
            return None if cid is None else state_of(self.store, cid).state

        for rel in list(self.releases):
            ok = [s for s in rel.slots if serves(state(self.topo.tray_id(s)),
                                                 state(self.topo.rack_id(s)))]
            if ok:
                request_return(job_dir, ok, rel.evidence | {"lifecycle": "serving"})
                self.log("returned", slots=ok, waited_s=round(time.time() - rel.since, 3),
                         **rel.evidence)
                rel.slots = [s for s in rel.slots if s not in ok]
            if not rel.slots:
                self.releases.remove(rel)
            elif not rel.said:
                rel.said = True
                rack = self.topo.rack_id(rel.slots[0])
                self.log("return_waits", slots=rel.slots, rack=rack, rack_state=state(rack),
                         why="the lifecycle does not serve them yet", **rel.evidence)

    def _busy(self, scope: str, st: JobState | None) -> str | None:
        """Why `scope` cannot be certified now, or None. A certification shares its GPUs'
        cgroups and links with whatever runs there: on a slot still serving the job it slows
        that rank (a false straggler) and measures under its load, so it waits, as an
        operator drains a tray before testing it; and a rack still under its coolant
        response is not repaired yet."""
        if st is not None and any(is_within(s, scope) for s in st.assignment):
            return "the job still runs there"
        if any(is_within(r.scope, scope) or is_within(scope, r.scope)
               for r in self.running):
            return "a certification runs there"
        rack = self.topo.holder(scope).rack or scope
        return "its rack's coolant response" if coolant_conditions(self.store, {rack}) else None

    def _begin(self, q: Queued, st: JobState | None) -> None:
        """Start `q`'s certification. A rack its coolant response powered off (maintenance)
        is first taken back to cabled, so the controller walks it to production once this
        certification passes (a repair needs evidence newer than it)."""
        if q.scope in self.ctl.racks and \
                state_of(self.store, q.scope).state == RackState.MAINTENANCE:
            with contextlib.suppress(UserError):  # a pass moved it meanwhile: the walk goes on
                self.ctl.advance(q.scope, RackState.CABLED.value,
                                 reason="soak: coolant flow restored (repair)")
        out = self.out / f"certify-{q.indices[-1]:03d}"
        self.running.append(Recert(indices=q.indices, scope=q.scope,
                                   proc=self._start(q.scope, out), out=out,
                                   started=time.time(),
                                   excluded=frozenset(st.excluded if st else ())))
        self.log("recertify", indices=list(q.indices), scope=q.scope)

    def stop(self) -> None:
        """Stop the certifications still running: SIGTERM to each one's process group (its
        own session, started here), so it stops its ranks; SIGKILL after 10 s."""
        for rc in self.running:
            stop_started(rc.proc, whole_group=True, grace_s=10)
        self.running.clear()

    # --- certification ------------------------------------------------------------------------
    def _start(self, scope: str | None, out: Path) -> subprocess.Popen[bytes]:
        out.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "rackscale", "certify", "run", "--backend", "real",
                "--runner", "local", "--lab", str(self.lab_dir), "--fleet", self.fleet_file,
                "--repeats", str(CERTIFY_REPEATS), "--db", self.db, "--out", str(out),
                "--json"]
        if scope is not None:
            args += ["--scope", scope]
        with (out / "certify.json").open("wb") as f, (out / "certify.err").open("wb") as e:
            # SIGTERM when the soak ends, even by SIGKILL: it stops its agents then
            proc = subprocess.Popen(args, stdout=f, stderr=e, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    preexec_fn=owned.die_with_parent(signal.SIGTERM))
        owned.record(proc.pid, "certification")
        return proc

    def _certify_now(self, scope: str | None, out: Path) -> dict[str, Any]:
        proc = self._start(scope, out)
        with contextlib.suppress(subprocess.TimeoutExpired):  # _finish says it timed out
            proc.wait(CERTIFY_TIMEOUT_S)
        return self._finish(proc, out)

    def _finish(self, proc: subprocess.Popen[bytes], out: Path) -> dict[str, Any]:
        """A certification's verdict: passed (exit 0, no finding) or why not."""
        if proc.poll() is None:
            stop_started(proc, whole_group=True, grace_s=10)
            return {"passed": False, "why": f"no verdict within {CERTIFY_TIMEOUT_S:.0f} s",
                    "out": str(out), "run_id": None}
        try:
            r = json.loads((out / "certify.json").read_text(encoding="utf-8"))
        except ValueError:
            err = (out / "certify.err").read_text(encoding="utf-8", errors="replace")[-400:]
            return {"passed": False, "why": f"exit {proc.returncode}: {err.strip()}",
                    "out": str(out), "run_id": None}
        found = [f"{f['component']} {f['kind']}" for f in r.get("findings", [])
                 if f.get("verdict", "fail") == "fail"]
        passed = proc.returncode == 0 and not found
        return {"passed": passed, "run_id": r.get("run_id"), "out": str(out),
                "findings": found, "wall_s": r.get("wall_s"),
                "why": "" if passed else (", ".join(found) or f"exit {proc.returncode}")}


def stop_started(proc: subprocess.Popen[bytes], *, whole_group: bool, grace_s: float) -> None:
    """Stop a process this soak started in a session of its own: SIGTERM (to its whole
    process group, or to it alone when it stops its own children, as a supervisor does its
    ranks), then SIGKILL to the group after `grace_s`."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        if whole_group:
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
