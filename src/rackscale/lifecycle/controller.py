"""The reconcile loop: desired state (lifecycle table) against observed state (drivers).

One pass reads every lifecycle row, every power target, every CDU and Slurm once, then per rack:
leak tiers -> coolant-fault tiers (with deadlines; both in `safety.py`) -> power (sequenced
under the region budget, only with verified flow) -> valve -> caps -> onboarding goal ->
escalation -> Slurm. It is
level-triggered and idempotent: a pass with nothing changed sends no command and writes
nothing, and a pass after a crash re-derives what is left from what the hardware reports, so a
transition is neither lost nor written twice (the compare-and-set of `Writes` guards that
too). The pass reads the fleet in a fixed number of queries and its writes commit together,
once, after its commands (`writes.py`): its cost is linear in the fleet. A crash mid-pass loses
only that pass's writes, which the next pass re-derives from the hardware.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any

from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.inputs import check_operator_text
from rackscale.lifecycle import repository
from rackscale.lifecycle.drivers import (
    CoolingDriver,
    DriverError,
    PowerDriver,
    power_targets,
)
from rackscale.lifecycle.interlocks import (
    CoolantTier,
    FaultPolicy,
    InterlockRefused,
    flow_ok,
)
from rackscale.lifecycle.passes import Pass, PassReport, RackPass, RunOutcome
from rackscale.lifecycle.repository import INTERLOCK, SLURM, Row, StaleState, read_rows
from rackscale.lifecycle.safety import SafetyResponses
from rackscale.lifecycle.slurm import REASON_PREFIX, SlurmControl, SlurmError, node_name
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    ONBOARDING_PATH,
    POWERED_RACK_STATES,
    SERVING_RACK_STATES,
    RackState,
    TrayState,
    check,
    parse_state,
    serving_target,
    trays_out,
)
from rackscale.lifecycle.states import (
    RACK as RACK_MACHINE,
)
from rackscale.lifecycle.states import TRAY as TRAY_MACHINE
from rackscale.lifecycle.writes import Writes
from rackscale.state import FleetState
from rackscale.store import LifecycleInterlockV1, Store

R, T = RackState, TrayState
_PATH_INDEX = {s.value: i for i, s in enumerate(ONBOARDING_PATH)}
_GOAL_INDEX = _PATH_INDEX | {R.CERTIFIED.value: len(ONBOARDING_PATH),
                             R.PRODUCTION.value: len(ONBOARDING_PATH) + 1}
PENDING_TIMEOUT_S = 60.0  # a BMC that has not applied power-on by then is asked again
_WAKE_AFTER_S = 0.05  # how long after a deadline `run` wakes, so the step is due
_HELD_STATES = frozenset({T.REPAIR.value, T.RMA.value})  # trays kept powered off


class Controller(SafetyResponses):
    def __init__(self, store: Store, topo: Topology, power: PowerDriver,
                 cooling: CoolingDriver, *, slurm: SlurmControl | None = None,
                 clock: Callable[[], float] = time.time, policy: FaultPolicy | None = None,
                 actor: str = "controller") -> None:
        self.store = repository.open_store(store)
        self.topo = topo
        self.power = power
        self.cooling = cooling
        self.slurm = slurm
        self.clock = clock
        self.policy = policy or FaultPolicy()
        self.actor = actor
        self.targets = power_targets(topo)
        self.racks = topo.rack_by_id
        self.budget = {g.name: g.power_budget_kw for g in topo.spec.regions}
        self.shelf_kw = {r.id: r.power_kw / max(1, len(self.targets[r.id][0]))
                         for r in topo.racks}
        self._pending: dict[str, float] = {}  # target -> when power-on was asked (across passes)
        self._holds: dict[str, str] = {}  # rack -> interlock rule holding it (logged once)
        self._nodes = {t: node_name(t) for _, trays in self.targets.values() for t in trays}
        # The certification evidence the gates read; refreshed from the log at each pass.
        self.state = FleetState(topo)
        self.enrolled = 0  # parts the last `enroll` added

    def enroll(self, have: Collection[str] | None = None) -> int:
        """Enroll the parts with no lifecycle row (`have`: the ids with one, just read);
        returns how many, also kept as `enrolled`."""
        self.enrolled = repository.enroll(self.store, self.topo, actor=self.actor, have=have)
        return self.enrolled

    # ------------------------------------------------------------------ the pass
    def reconcile(self) -> PassReport:
        t0 = time.perf_counter()
        ps = self._read_pass(self.clock())
        for rid in self.targets:
            row = ps.rows.get(rid)
            reading = ps.readings.get(rid)
            if row is None or reading is None:
                continue  # not enrolled / no CDU telemetry: nothing is commanded blind
            shelves, trays = self.targets[rid]
            try:
                with ps.w.for_unit(rid):
                    self._rack(RackPass(ps, rid, row, shelves, trays, reading))
            except (DriverError, StaleState) as err:
                # A driver that fails for one rack must not stop the fleet: its queued writes
                # are dropped (the commands it sent stay sent) and the next pass retries it.
                ps.rep.errors[rid] = str(err)
        if self.slurm is not None:
            try:
                with ps.w.for_unit("slurm"):
                    self._slurm(self.slurm, ps)
            except SlurmError as err:  # slurmctld down: the racks go on, Slurm next pass
                ps.rep.errors["slurm"] = str(err)
        # StaleState: an operator (`lifecycle advance/drain`) moved a row of a rack after this
        # pass read it; that rack's writes roll back and the next pass starts from the new
        # state instead of the whole controller stopping.
        ps.rep.writes = len(ps.w)
        written, dropped = ps.w.commit()
        ps.rep.errors.update(dropped)
        ps.rep.transitions = len(written)
        ps.rep.seconds = time.perf_counter() - t0
        return ps.rep

    def _read_pass(self, now: float) -> Pass:
        """Every lifecycle row, power target, CDU and cap, read once for the pass."""
        self.state.refresh(self.store)
        rows = read_rows(self.store)
        # Bad-tray counts and leak holds are tallied here, once.
        bad: dict[str, int] = {}
        held: set[str] = set()
        repair: set[str] = set()
        for cid, row in rows.items():
            if cid != row.rack:
                if row.state in BAD_TRAY_STATES:
                    bad[row.rack] = bad.get(row.rack, 0) + 1
                if row.tier >= CoolantTier.OFF:
                    held.add(cid)
                if row.state in _HELD_STATES:
                    repair.add(cid)
        obs = self.power.observe()
        ps = Pass(now=now, rows=rows, obs=obs, caps=self.power.caps(),
                  readings=self.cooling.read(), w=Writes(self.store, self.state,
                                                         actor=self.actor),
                  bad=bad, held=held, repair=repair)
        # Budget admission reserves a rack's whole nameplate when its first shelf goes on, so
        # racks never split the budget between them and stall half-powered.
        for rid, (shelves, _) in self.targets.items():
            if any(obs.get(t) or t in self._pending for t in shelves):
                region = self.racks[rid].region
                ps.load[region] = ps.load.get(region, 0.0) + self.racks[rid].power_kw
        return ps

    def advance(self, cid: str, to: str, *, reason: str) -> dict[str, Any]:
        """An operator's move of one rack or tray to `to`: one legal transition. Cooling
        verified and powered are refused while the coolant interlock would hold the rack;
        powered runs the sequenced power-up (passes until the rack reports powered) and, when
        it cannot finish, puts the rack's goal back and switches off what it turned on."""
        reason = check_operator_text(reason)  # no NUL/ESC into the history
        row = repository.state_of(self.store, cid)
        target = parse_state(row.machine, to)
        if row.machine == RACK_MACHINE and target in (R.COOLING_VERIFIED, R.POWERED):
            rack = self.racks[cid]
            why = flow_ok(self.cooling.read()[cid], rack.required_flow_lpm,
                          self.policy.max_inlet_c)
            if why is not None:
                raise InterlockRefused(f"{to} of {cid} refused by the coolant interlock: "
                                       f"{why}; nothing changed")
        if row.machine == RACK_MACHINE and target == R.POWERED:
            check(RACK_MACHINE, cid, row.state, target)  # refuse before anything is switched
            repository.set_goal(self.store, [cid], R.POWERED.value)
            for _ in range(4 * len(self.targets[cid][0]) + 4):
                why_not = self.reconcile().waiting.get(cid)
                if repository.state_of(self.store, cid).state == R.POWERED:
                    return {"component": cid, "from": row.state, "to": "powered"}
            # An error changes nothing: put the goal back (else a later `lifecycle run` would
            # power the rack up behind the operator's back) and let one pass switch off any
            # shelf this attempt turned on.
            repository.set_goal(self.store, [cid], row.goal)
            self.reconcile()
            raise UserError(f"{cid} did not reach powered: {why_not}; its goal is back to "
                            f"{row.goal or 'none'} and it stays {row.state}")
        self.state.refresh(self.store)
        t = repository.transition(self.store, cid, target, actor=self.actor, reason=reason,
                                  state=self.state)
        return {"component": cid, "from": t.src, "to": t.dst, "seq": t.seq}

    def run(self, *, max_passes: int | None = None, until_idle: bool = False,
            period_s: float = 0.0, on_pass: Callable[[PassReport], None] | None = None,
            wait: Callable[[float], None] | None = None,
            max_wait_s: float | None = None) -> RunOutcome:
        """Run passes. With `until_idle`, stop at the first pass that changes nothing and has
        nothing timed to come (a coolant step not yet due, a shelf not yet reporting power):
        a pass that is quiet only because the next step is not due yet is not idle. With
        `wait` (e.g. `time.sleep`) the loop sleeps until the next deadline and goes on; with
        none, or once that deadline lies beyond `max_wait_s` from the start, it stops and
        says what is still to come (`RunOutcome.pending`)."""
        n, start = 0, self.clock()
        rep = PassReport()
        while max_passes is None or n < max_passes:
            rep = self.reconcile()
            n += 1
            if on_pass:
                on_pass(rep)
            if until_idle and not rep.changed and not self._pending:
                nxt = rep.next_due()
                if nxt is None:
                    return RunOutcome(n, {})
                if wait is None:
                    return RunOutcome(n, rep.due)
                if max_wait_s is not None and nxt[1] > start + max_wait_s:
                    return RunOutcome(n, rep.due, waited_out=True)
                # a hair past the deadline: the step runs when its age reaches its due time
                wait(max(0.0, nxt[1] - self.clock()) + _WAKE_AFTER_S)
                continue
            if period_s:
                time.sleep(period_s)  # the loop's cadence, not a synchronisation
        return RunOutcome(n, rep.due)

    # ------------------------------------------------------------------ one rack
    def _rack(self, r: RackPass) -> None:
        """Leak tiers, coolant-fault tiers, valve and caps, power, onboarding, escalation."""
        if self._leak(r):
            return
        self._coolant(r)
        ps, rid, row, reading = r.ps, r.rid, r.row, r.reading
        rep, pol = ps.rep, self.policy
        # ---- valve and caps follow the state
        want_valve = row.state != R.ISOLATED and row.tier < CoolantTier.ISOLATE
        if reading.valve_open != want_valve:
            self.cooling.set_valve(rid, want_valve)
            rep.commands += 1
        want_cap = CoolantTier.CAP <= row.tier < CoolantTier.OFF
        if (rid in ps.caps) != want_cap:
            self.power.set_cap(rid, pol.cap_fraction if want_cap else None)
            rep.commands += 1

        # ---- power
        goal_i = _GOAL_INDEX.get(row.goal or "", -1)
        sequencing = (row.state == R.COOLING_VERIFIED and goal_i > _PATH_INDEX[row.state]
                      and row.tier == CoolantTier.NONE)
        if (row.state in POWERED_RACK_STATES and row.tier < CoolantTier.OFF) or sequencing:
            self._power_up(r)
        else:
            self._all_off(r)

        # ---- onboarding goal and escalation
        if row.tier == CoolantTier.NONE and goal_i > _GOAL_INDEX.get(row.state, 99):
            self._walk(r)
        if row.state in SERVING_RACK_STATES:
            self._promote_trays(r)
        self._escalate(r)

    def _power_up(self, r: RackPass) -> None:
        """Shelves one at a time under the flow interlock and the region budget, then trays."""
        ps, rid, row, reading = r.ps, r.rid, r.row, r.reading
        shelves, trays, obs, load, now, rep = r.shelves, r.trays, ps.obs, ps.load, ps.now, ps.rep
        rack = self.racks[rid]
        off = [t for t in shelves if not obs.get(t)]
        for t in shelves:
            if obs.get(t):
                self._pending.pop(t, None)
        if off:
            why = flow_ok(reading, rack.required_flow_lpm, self.policy.max_inlet_c)
            if why is not None:
                self._hold(r, "power_on", f"power-on interlock: {why}")
                return
            self._holds.pop(rid, None)
            nxt = off[0]
            if nxt in self._pending and now - self._pending[nxt] < PENDING_TIMEOUT_S:
                rep.waiting[rid] = f"waiting for {nxt} to report power on"
                return
            budget = self.budget.get(rack.region)
            starting = len(off) == len(shelves) and not any(t in self._pending for t in shelves)
            used = load.get(rack.region, 0.0)
            if starting and budget is not None and used + rack.power_kw > budget + 1e-9:
                rep.waiting[rid] = (f"region {rack.region} power budget: {used:.0f} kW "
                                    f"reserved + {rack.power_kw:.0f} kW > {budget:.0f} kW")
                return
            self.power.set_power(nxt, True)
            rep.commands += 1
            if starting:
                load[rack.region] = used + rack.power_kw
            self._pending[nxt] = now
            return  # shelves come up one at a time: the next one after this one reports on
        held, repair = ps.held, ps.repair
        for tray in trays:
            on = obs.get(tray)
            hold = tray in held or tray in repair
            if hold and on:
                self.power.set_power(tray, False)
                rep.commands += 1
            elif not hold and not on:
                self.power.set_power(tray, True)
                obs[tray] = True
                rep.commands += 1
        if row.state == R.COOLING_VERIFIED:
            self._move(rid, row, R.POWERED,
                       f"power sequence complete: {len(shelves)} shelves brought up one at a "
                       f"time with flow {reading.flow_lpm:.0f} L/min verified", ps,
                       shelves=len(shelves))

    def _all_off(self, r: RackPass) -> None:
        obs, rep = r.ps.obs, r.ps.rep
        for t in (*r.trays, *reversed(r.shelves)):  # trays before the shelves that feed them
            if obs.get(t):
                self.power.set_power(t, False)
                obs[t] = False
                rep.commands += 1
            self._pending.pop(t, None)

    def _walk(self, r: RackPass) -> None:
        """One step along the onboarding path towards the rack's goal."""
        ps, rid, row, reading = r.ps, r.rid, r.row, r.reading
        rows, trays, obs = ps.rows, r.trays, ps.obs
        rack = self.racks[rid]
        st = row.state
        if st == R.RECEIVED:
            self._move(rid, row, R.CABLED, "onboarding: power, coolant and network "
                       "cabled (simulated check)", ps)
        elif st == R.CABLED:
            why = flow_ok(reading, rack.required_flow_lpm, self.policy.max_inlet_c)
            if why is not None:
                self._hold(r, "cooling_verify", f"cooling not verified: {why}")
                return
            self._holds.pop(rid, None)
            self._move(rid, row, R.COOLING_VERIFIED,
                       f"coolant flow {reading.flow_lpm:.0f} L/min >= required "
                       f"{rack.required_flow_lpm:.0f} L/min ({rack.power_kw:.0f} kW)", ps,
                       flow_lpm=reading.flow_lpm, required_lpm=round(rack.required_flow_lpm, 1))
        elif st == R.POWERED:
            for tray in trays:
                trow = rows.get(tray)
                if trow is not None and trow.state == T.ONBOARD and obs.get(tray):
                    self._move(tray, trow, T.SEATRIAL, "powered: BMC reachable", ps)
            self._move(rid, row, R.FIRMWARE, "firmware, switch OS and NVLink "
                       "configuration applied (simulated Zap)", ps)
        elif st == R.FIRMWARE:
            for tray in trays:
                trow = rows.get(tray)
                if trow is not None and trow.state == T.SEATRIAL:
                    self._move(tray, trow, T.BURN_IN, "rack firmware applied", ps)
            self._move(rid, row, R.BURN_IN, "burn-in started; waiting for certification",
                       ps)
        elif st == R.BURN_IN:
            gate = ps.w.gate(rid, RACK_MACHINE)
            if gate.open:
                self._move(rid, row, R.CERTIFIED, "passing certification on record", ps)
            else:
                ps.rep.waiting[rid] = "burn_in: " + gate.why
        elif st == R.CERTIFIED:
            self._try_production(rid, row, ps, "goal production")

    def _promote_trays(self, r: RackPass) -> None:
        """Trays in burn_in of a serving rack join production once a passing certification
        newer than their last repair is on record (the state repository checks it again)."""
        for tray in r.trays:
            trow = r.ps.rows.get(tray)
            if trow is None or trow.state != T.BURN_IN:
                continue
            if r.ps.w.gate(tray, TRAY_MACHINE).open:
                self._move(tray, trow, T.PRODUCTION, "passing certification on record", r.ps)

    def _escalate(self, r: RackPass) -> None:
        """The rack template's rule: trays out degrade a serving rack; too many cordon an
        NVL72 rack (one NVLink domain)."""
        ps, rid, row = r.ps, r.rid, r.row
        template = self.racks[rid].template
        bad = ps.bad.get(rid, 0)
        if row.state not in (R.PRODUCTION, R.DEGRADED):
            return
        target = serving_target(template, bad)
        if target is None:
            self._move(rid, row, R.DRAINING, f"{bad} trays bad (> {template.max_bad_trays}): "
                       "NVL72 rack cordoned", ps, bad_trays=bad)
        elif target == R.DEGRADED and row.state == R.PRODUCTION:
            self._move(rid, row, R.DEGRADED, trays_out(template, bad), ps)

    def _try_production(self, rid: str, row: Row, ps: Pass, why: str) -> None:
        """Back to serving (production, or degraded with trays out) on open evidence."""
        gate = ps.w.gate(rid, RACK_MACHINE)
        if not gate.open:
            ps.rep.waiting[rid] = "production: " + gate.why
            return
        template, bad = self.racks[rid].template, ps.bad.get(rid, 0)
        target = serving_target(template, bad)
        if target is None:
            ps.rep.waiting[rid] = (f"production: {bad} trays bad (> {template.max_bad_trays}):"
                                   " repair them first")
            return
        if target != row.state:
            self._move(rid, row, target, why if target == R.PRODUCTION
                       else f"{why}; {trays_out(template, bad)}", ps)

    # ------------------------------------------------------------------ writes (queued)
    def _move(self, cid: str, row: Row, to: str, reason: str, ps: Pass, **extra: Any) -> None:
        tray = cid in self._nodes
        ps.w.move(cid, TRAY_MACHINE if tray else RACK_MACHINE, row.state, to, reason=reason,
                  extra=extra or None)
        if tray:  # keep its rack's bad-tray count current
            rack = row.rack  # the row says which rack (a topology walk per move cost 2 s at 128k)
            delta = (to in BAD_TRAY_STATES) - (row.state in BAD_TRAY_STATES)
            ps.bad[rack] = ps.bad.get(rack, 0) + delta
        row.state = str(to)
        ps.rep.transitions += 1

    def _fault(self, cid: str, row: Row, since: float | None, tier: int, ps: Pass) -> None:
        ps.w.fault(cid, since, tier)
        row.since, row.tier = since, int(tier)
        if int(tier) >= CoolantTier.OFF and cid in self._nodes:
            ps.held.add(cid)

    def _hold(self, r: RackPass, rule: str, why: str) -> None:
        """The coolant interlock holds a rack: say so every pass, log it once per hold. The
        log's last word on the rack decides after a restart, so a restart does not repeat it."""
        rid, reading = r.rid, r.reading
        r.ps.rep.waiting[rid] = why
        if self._holds.get(rid) == rule:
            return
        self._holds[rid] = rule
        last = self.store.events(component_id=rid, kind_prefix="lifecycle.", limit=1,
                                 newest_first=True)
        if last and last[0].kind == INTERLOCK and \
                last[0].read(LifecycleInterlockV1).rule == rule:
            return
        self._interlock(rid, rule, "hold", why, r.ps,
                        flow_lpm=round(reading.flow_lpm, 1),
                        required_lpm=round(self.racks[rid].required_flow_lpm, 1))

    def _interlock(self, cid: str, rule: str, action: str, reason: str, ps: Pass,
                   **extra: Any) -> None:
        payload = {"rule": rule, "action": action, "at": self.clock(), **extra}
        ps.w.event(cid, INTERLOCK, payload, reason=reason)
        ps.rep.interlocks += 1

    # ------------------------------------------------------------------ slurm
    def _slurm(self, slurm: SlurmControl, ps: Pass) -> None:
        rows, rep = ps.rows, ps.rep
        known = slurm.nodes()
        drains: dict[str, list[tuple[str, str]]] = {}
        resumes: list[tuple[str, str]] = []
        for rid, (_, trays) in self.targets.items():
            rrow = rows.get(rid)
            if rrow is None:
                continue
            serving = rrow.state in SERVING_RACK_STATES
            for tray in trays:
                name = self._nodes[tray]
                have = known.get(name)
                trow = rows.get(tray)
                if have is None or trow is None:
                    continue
                up = serving and trow.state == T.PRODUCTION
                if up and have.startswith(REASON_PREFIX):
                    resumes.append((name, tray))
                elif not up and not have:
                    why = (f"tray {trow.state}" if trow.state != T.PRODUCTION
                           else f"rack {rrow.state}")
                    drains.setdefault(REASON_PREFIX + why, []).append((name, tray))
        for reason, nodes in drains.items():
            slurm.drain([n for n, _ in nodes], reason)
            for n, tray in nodes:
                ps.w.event(tray, SLURM, {"action": "drain", "node": n}, reason=reason)
            rep.slurm += len(nodes)
        if resumes:
            slurm.resume([n for n, _ in resumes])
            for n, tray in resumes:
                ps.w.event(tray, SLURM, {"action": "resume", "node": n},
                           reason="back in production")
            rep.slurm += len(resumes)
