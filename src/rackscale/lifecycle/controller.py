"""The reconcile loop: desired state (lifecycle table) against observed state (drivers).

One pass reads every lifecycle row, every power target, every CDU and Slurm once, then per rack:
leak tiers -> coolant-fault tiers (with deadlines) -> power (sequenced under the region budget,
only with verified flow) -> valve -> caps -> onboarding goal -> escalation -> Slurm. It is
level-triggered and idempotent: a pass with nothing changed sends no command and writes
nothing, and a pass after a crash re-derives what is left from what the hardware reports, so a
transition is neither lost nor written twice (the ledger's compare-and-set guards that too).
Writes for one rack commit together, after its commands.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from rackscale.fleet import Topology
from rackscale.lifecycle import ledger
from rackscale.lifecycle.drivers import (
    CduTelemetry,
    CoolingDriver,
    DriverError,
    PowerDriver,
    power_targets,
)
from rackscale.lifecycle.interlocks import (
    FaultPolicy,
    Tier,
    coolant_fault,
    flow_ok,
    leak_tier,
)
from rackscale.lifecycle.ledger import INTERLOCK, SLURM, LifecycleRow, StaleState
from rackscale.lifecycle.passes import PassReport, Tx
from rackscale.lifecycle.slurm import REASON_PREFIX, SlurmControl, SlurmError, node_name
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    ONBOARDING_PATH,
    POWERED_RACK_STATES,
    RACK_TRANSITIONS,
    SERVING_RACK_STATES,
    TRAY_TRANSITIONS,
    RackState,
    TrayState,
)
from rackscale.store import Store

R, T = RackState, TrayState
_PATH_INDEX = {s.value: i for i, s in enumerate(ONBOARDING_PATH)}
_GOAL_INDEX = _PATH_INDEX | {R.CERTIFIED.value: len(ONBOARDING_PATH),
                             R.PRODUCTION.value: len(ONBOARDING_PATH) + 1}
PENDING_TIMEOUT_S = 60.0  # a BMC that has not applied power-on by then is asked again
_HELD_STATES = frozenset({T.REPAIR.value, T.RMA.value})  # trays kept powered off


@dataclass(slots=True)
class _Row:
    state: str
    goal: str | None
    since: float | None
    tier: int


class Controller:
    def __init__(self, store: Store, topo: Topology, power: PowerDriver,
                 cooling: CoolingDriver, *, slurm: SlurmControl | None = None,
                 clock: Callable[[], float] = time.time, policy: FaultPolicy | None = None,
                 actor: str = "controller") -> None:
        self.store = ledger.open_store(store)
        self.topo = topo
        self.power = power
        self.cooling = cooling
        self.slurm = slurm
        self.clock = clock
        self.policy = policy or FaultPolicy()
        self.actor = actor
        self.targets = power_targets(topo)
        self.racks = {r.id: r for r in topo.racks}
        self.budget = {g.name: g.power_budget_kw for g in topo.spec.regions}
        self.shelf_kw = {r.id: r.power_kw / max(1, len(self.targets[r.id][0]))
                         for r in topo.racks}
        self._pending: dict[str, float] = {}
        self._bad: dict[str, int] = {}  # rack -> trays in a bad state (this pass)
        self._held: set[str] = set()  # trays held off by a leak (this pass)
        self._repair: set[str] = set()  # trays in repair/rma: kept off (this pass)
        self._holds: dict[str, str] = {}  # rack -> interlock rule holding it (logged once)
        self._nodes = {t: node_name(t) for _, trays in self.targets.values() for t in trays}

    def enroll(self) -> int:
        return ledger.enroll(self.store, self.topo, actor=self.actor)

    # ------------------------------------------------------------------ the pass
    def reconcile(self) -> PassReport:
        now = self.clock()
        rep = PassReport()
        # Raw driver rows fetched in one go: at ~34k rows per pass the ORM's per-row cost
        # would dominate. Bad-tray counts and leak holds are tallied here, once.
        with self.store.engine.connect() as conn:
            cur = conn.connection.cursor()  # the DBAPI cursor: plain tuples, no Row objects
            cur.execute("SELECT component_id, state, goal, fault_since, fault_tier, rack "
                        "FROM lifecycle_state")
            raw = cur.fetchall()
            cur.close()
        rows: dict[str, _Row] = {}
        self._bad = {}
        self._held = set()
        self._repair = set()
        for cid, st, goal, since, tier, rack in raw:
            rows[cid] = _Row(st, goal, since, tier)
            if cid != rack:
                if st in BAD_TRAY_STATES:
                    self._bad[rack] = self._bad.get(rack, 0) + 1
                if tier >= Tier.OFF:
                    self._held.add(cid)
                if st in _HELD_STATES:
                    self._repair.add(cid)
        obs = self.power.observe()
        readings = self.cooling.read()
        caps = self.power.caps()
        # Budget admission reserves a rack's whole nameplate when its first shelf goes on, so
        # racks never split the budget between them and stall half-powered.
        load: dict[str, float] = {}
        for rid, (shelves, _) in self.targets.items():
            if any(obs.get(t) or t in self._pending for t in shelves):
                region = self.racks[rid].region
                load[region] = load.get(region, 0.0) + self.racks[rid].power_kw
        for rid in self.targets:
            row = rows.get(rid)
            reading = readings.get(rid)
            if row is None or reading is None:
                continue  # not enrolled / no CDU telemetry: nothing is commanded blind
            try:
                with ExitStack() as stack:
                    tx = Tx(self.store, stack)
                    self._rack(rid, row, rows, obs, reading, caps, now, load, rep, tx)
            except (DriverError, StaleState) as err:
                # StaleState: an operator (`lifecycle advance/drain`) moved a row of this rack
                # after this pass read it; the rack's writes roll back and the next pass
                # starts from the new state instead of the whole controller stopping.
                rep.errors[rid] = str(err)
        if self.slurm is not None:
            try:
                self._slurm(self.slurm, rows, rep)
            except SlurmError as err:  # slurmctld down: the racks go on, Slurm next pass
                rep.errors["slurm"] = str(err)
        return rep

    def run(self, *, max_passes: int | None = None, until_idle: bool = False,
            period_s: float = 0.0, on_pass: Callable[[PassReport], None] | None = None) -> int:
        """Run passes; with `until_idle` stop after the first pass that changed nothing."""
        n = 0
        while max_passes is None or n < max_passes:
            rep = self.reconcile()
            n += 1
            if on_pass:
                on_pass(rep)
            if until_idle and not rep.changed and not self._pending:
                break
            if period_s:
                time.sleep(period_s)  # the loop's cadence, not a synchronisation
        return n

    # ------------------------------------------------------------------ one rack
    def _rack(self, rid: str, row: _Row, rows: dict[str, _Row], obs: dict[str, bool],
              reading: CduTelemetry, caps: dict[str, float], now: float,
              load: dict[str, float], rep: PassReport, tx: Tx) -> None:
        rack = self.racks[rid]
        shelves, trays = self.targets[rid]
        need = rack.required_flow_lpm
        pol = self.policy
        any_on = any(obs.get(t) for t in (*shelves, *trays))

        lt = leak_tier(reading)
        if lt in ("critical", "severe"):
            legal = R.ISOLATED in RACK_TRANSITIONS[R(row.state)]
            if any_on or reading.valve_open or (legal and row.state != R.ISOLATED):
                self._all_off(shelves, trays, obs, rep)
                if reading.valve_open:
                    self.cooling.set_valve(rid, False)
                    rep.commands += 1
                why = ("critical leak: valve closed" if lt == "critical" else
                       f"{len(reading.leaking_trays)} trays leaking (> 2): rack isolated")
                self._interlock(tx(), rid, f"leak_{lt}", "isolate", why, rep,
                                trays=sorted(reading.leaking_trays))
                if legal and row.state != R.ISOLATED:
                    self._move(tx(), rid, row, R.ISOLATED, why, rep)
                self._fault(tx(), rid, row, row.since or now, Tier.ISOLATE)
            return
        if lt == "general":
            for tray in sorted(reading.leaking_trays):
                trow = rows.get(tray)
                if trow is None or trow.tier >= Tier.OFF:
                    continue
                if obs.get(tray):
                    self.power.set_power(tray, False)
                    obs[tray] = False
                    rep.commands += 1
                why = f"leak at tray {tray}: tray shut down (1-2 leaking trays)"
                self._interlock(tx(), tray, "leak_general", "power_off_tray", why, rep)
                if T(trow.state) not in BAD_TRAY_STATES and T.TRIAGE in TRAY_TRANSITIONS[
                        T(trow.state)]:
                    self._move(tx(), tray, trow, T.TRIAGE, why, rep)
                self._fault(tx(), tray, trow, now, Tier.OFF)

        # a tray held off by a leak is released once it is dry and out of triage
        for tray in self._held.intersection(trays) if self._held else ():
            trow = rows[tray]
            if (trow.tier >= Tier.OFF and tray not in reading.leaking_trays
                    and trow.state not in BAD_TRAY_STATES):
                self._fault(tx(), tray, trow, None, Tier.NONE)

        fault = coolant_fault(reading, need, pol.max_inlet_c)
        shelves_on = any(obs.get(t) for t in shelves)
        if fault and (shelves_on or row.tier > 0):
            since = row.since if row.since is not None else now
            age = now - since
            tier = Tier(row.tier)
            for step in (Tier.WARN, Tier.CAP, Tier.DRAIN, Tier.OFF, Tier.ISOLATE):
                if tier >= step:
                    continue
                if age < pol.due(step):
                    break
                self._step(tx, rid, row, step, fault, shelves, trays, obs, reading, rep)
                tier = step
            if tier != row.tier or row.since is None:
                self._fault(tx(), rid, row, since, tier)
        elif not fault and row.tier > 0:
            cleared_from = row.tier
            self._fault(tx(), rid, row, None, Tier.NONE)
            self._interlock(tx(), rid, "coolant", "cleared", "coolant fault cleared", rep,
                            tier=int(cleared_from))
            if row.state in (R.DEGRADED, R.DRAINING) and cleared_from < Tier.OFF:
                self._try_production(tx(), rid, row, rep, "coolant fault cleared")

        # ---- valve and caps follow the state
        want_valve = row.state != R.ISOLATED and row.tier < Tier.ISOLATE
        if reading.valve_open != want_valve:
            self.cooling.set_valve(rid, want_valve)
            rep.commands += 1
        want_cap = Tier.CAP <= row.tier < Tier.OFF
        if (rid in caps) != want_cap:
            self.power.set_cap(rid, pol.cap_fraction if want_cap else None)
            rep.commands += 1

        # ---- power
        goal_i = _GOAL_INDEX.get(row.goal or "", -1)
        sequencing = (row.state == R.COOLING_VERIFIED and goal_i > _PATH_INDEX[row.state]
                      and row.tier == Tier.NONE)
        if (row.state in POWERED_RACK_STATES and row.tier < Tier.OFF) or sequencing:
            self._power_up(rid, row, rows, shelves, trays, obs, reading, load, now, rep, tx)
        else:
            self._all_off(shelves, trays, obs, rep)

        # ---- onboarding goal and escalation
        if row.tier == Tier.NONE and goal_i > _GOAL_INDEX.get(row.state, 99):
            self._walk(tx, rid, row, rows, trays, obs, reading, rep)
        if row.state in SERVING_RACK_STATES:
            self._promote_trays(tx, rows, trays, rep)
        self._escalate(tx, rid, row, rows, trays, rep)

    def _power_up(self, rid: str, row: _Row, rows: dict[str, _Row], shelves: list[str],
                  trays: list[str], obs: dict[str, bool], reading: CduTelemetry,
                  load: dict[str, float], now: float, rep: PassReport, tx: Tx) -> None:
        rack = self.racks[rid]
        off = [t for t in shelves if not obs.get(t)]
        for t in shelves:
            if obs.get(t):
                self._pending.pop(t, None)
        if off:
            why = flow_ok(reading, rack.required_flow_lpm, self.policy.max_inlet_c)
            if why is not None:
                self._hold(tx, rid, "power_on", f"power-on interlock: {why}", reading, rep)
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
        held, repair = self._held, self._repair
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
            self._move(tx(), rid, row, R.POWERED,
                       f"power sequence complete: {len(shelves)} shelves brought up one at a "
                       f"time with flow {reading.flow_lpm:.0f} L/min verified", rep,
                       shelves=len(shelves))

    def _all_off(self, shelves: list[str], trays: list[str], obs: dict[str, bool],
                 rep: PassReport) -> None:
        for t in (*trays, *reversed(shelves)):  # trays before the shelves that feed them
            if obs.get(t):
                self.power.set_power(t, False)
                obs[t] = False
                rep.commands += 1
            self._pending.pop(t, None)

    def _step(self, tx: Tx, rid: str, row: _Row, step: Tier, fault: str,
              shelves: list[str], trays: list[str], obs: dict[str, bool],
              reading: CduTelemetry, rep: PassReport) -> None:
        s = tx()
        action = step.name.lower()
        self._interlock(s, rid, "coolant", action, f"coolant fault ({fault}): {action}", rep,
                        tier=int(step))
        if step == Tier.CAP:
            self.power.set_cap(rid, self.policy.cap_fraction)
            rep.commands += 1
            if row.state == R.PRODUCTION:
                self._move(s, rid, row, R.DEGRADED, f"coolant fault ({fault}): power capped", rep)
        elif step == Tier.DRAIN:
            if row.state in (R.PRODUCTION, R.DEGRADED):
                self._move(s, rid, row, R.DRAINING, f"coolant fault ({fault}): jobs drained", rep)
        elif step == Tier.OFF:
            self._all_off(shelves, trays, obs, rep)
            if R.MAINTENANCE in RACK_TRANSITIONS[R(row.state)] and row.state in POWERED_RACK_STATES:
                self._move(s, rid, row, R.MAINTENANCE,
                           f"coolant fault ({fault}): rack powered off", rep)
        elif step == Tier.ISOLATE:
            if reading.valve_open:
                self.cooling.set_valve(rid, False)
                rep.commands += 1
            if R.ISOLATED in RACK_TRANSITIONS[R(row.state)]:
                self._move(s, rid, row, R.ISOLATED,
                           f"coolant fault ({fault}) unresolved: valve closed", rep)

    def _walk(self, tx: Tx, rid: str, row: _Row, rows: dict[str, _Row], trays: list[str],
              obs: dict[str, bool], reading: CduTelemetry, rep: PassReport) -> None:
        rack = self.racks[rid]
        st = row.state
        if st == R.RECEIVED:
            self._move(tx(), rid, row, R.CABLED, "onboarding: power, coolant and network "
                       "cabled (simulated check)", rep)
        elif st == R.CABLED:
            why = flow_ok(reading, rack.required_flow_lpm, self.policy.max_inlet_c)
            if why is not None:
                self._hold(tx, rid, "cooling_verify", f"cooling not verified: {why}", reading,
                           rep)
                return
            self._holds.pop(rid, None)
            self._move(tx(), rid, row, R.COOLING_VERIFIED,
                       f"coolant flow {reading.flow_lpm:.0f} L/min >= required "
                       f"{rack.required_flow_lpm:.0f} L/min ({rack.power_kw:.0f} kW)", rep,
                       flow_lpm=reading.flow_lpm, required_lpm=round(rack.required_flow_lpm, 1))
        elif st == R.POWERED:
            for tray in trays:
                trow = rows.get(tray)
                if trow is not None and trow.state == T.ONBOARD and obs.get(tray):
                    self._move(tx(), tray, trow, T.SEATRIAL, "powered: BMC reachable", rep)
            self._move(tx(), rid, row, R.FIRMWARE, "firmware, switch OS and NVLink "
                       "configuration applied (simulated Zap)", rep)
        elif st == R.FIRMWARE:
            for tray in trays:
                trow = rows.get(tray)
                if trow is not None and trow.state == T.SEATRIAL:
                    self._move(tx(), tray, trow, T.BURN_IN, "rack firmware applied", rep)
            self._move(tx(), rid, row, R.BURN_IN, "burn-in started; waiting for certification",
                       rep)
        elif st == R.BURN_IN:
            s = tx()
            if ledger.passing_evidence(s, ledger.get_row(s, rid)) is not None:
                self._move(s, rid, row, R.CERTIFIED, "passing certification on record", rep)
        elif st == R.CERTIFIED:
            self._try_production(tx(), rid, row, rep, "goal production")

    def _promote_trays(self, tx: Tx, rows: dict[str, _Row], trays: list[str],
                       rep: PassReport) -> None:
        """Trays in burn_in of a serving rack join production once a passing certification
        newer than their last repair is on record (the ledger checks it again)."""
        for tray in trays:
            trow = rows.get(tray)
            if trow is None or trow.state != T.BURN_IN:
                continue
            s = tx()
            if ledger.passing_evidence(s, ledger.get_row(s, tray)) is not None:
                self._move(s, tray, trow, T.PRODUCTION, "passing certification on record", rep)

    def _escalate(self, tx: Tx, rid: str, row: _Row, rows: dict[str, _Row],
                  trays: list[str], rep: PassReport) -> None:
        if self.racks[rid].template.shape != "nvl72":
            return
        bad = self._bad.get(rid, 0)
        if bad > 2 and row.state in (R.PRODUCTION, R.DEGRADED):
            self._move(tx(), rid, row, R.DRAINING,
                       f"{bad} trays bad (> 2): NVL72 rack cordoned", rep, bad_trays=bad)
        elif 0 < bad <= 2 and row.state == R.PRODUCTION:
            self._move(tx(), rid, row, R.DEGRADED, f"{bad} tray(s) out (<= 2 tolerated)", rep)

    def _try_production(self, s: Session, rid: str, row: _Row, rep: PassReport,
                        why: str) -> None:
        lrow = ledger.get_row(s, rid)
        if ledger.passing_evidence(s, lrow) is None:
            rep.waiting[rid] = "production needs a passing certification newer than repair"
            return
        self._move(s, rid, row, R.PRODUCTION, why, rep)

    # ------------------------------------------------------------------ writes
    def _move(self, s: Session, cid: str, row: _Row, to: str, reason: str, rep: PassReport,
              **extra: Any) -> None:
        ledger.transition(self.store, cid, to, actor=self.actor, reason=reason, session=s,
                          expect=row.state, extra=extra or None)
        if cid in self._nodes:  # a tray: keep its rack's bad-tray count current
            rack = cid.rsplit("/", 1)[0]
            delta = (to in BAD_TRAY_STATES) - (row.state in BAD_TRAY_STATES)
            self._bad[rack] = self._bad.get(rack, 0) + delta
        row.state = str(to)
        rep.transitions += 1

    def _fault(self, s: Session, cid: str, row: _Row, since: float | None, tier: int) -> None:
        s.execute(update(LifecycleRow).where(LifecycleRow.component_id == cid)
                  .values(fault_since=since, fault_tier=int(tier)))
        row.since, row.tier = since, int(tier)
        if int(tier) >= Tier.OFF and cid in self._nodes:
            self._held.add(cid)

    def _hold(self, tx: Tx, rid: str, rule: str, why: str, reading: CduTelemetry,
              rep: PassReport) -> None:
        """The coolant interlock holds a rack: say so every pass, log it once per hold. The
        log's last word on the rack decides after a restart, so a restart does not repeat it."""
        rep.waiting[rid] = why
        if self._holds.get(rid) == rule:
            return
        self._holds[rid] = rule
        last = self.store.events(component_id=rid, kind_prefix="lifecycle.", limit=1,
                                 newest_first=True)
        if last and last[0].kind == INTERLOCK and last[0].payload.get("rule") == rule:
            return
        self._interlock(tx(), rid, rule, "hold", why, rep, flow_lpm=round(reading.flow_lpm, 1),
                        required_lpm=round(self.racks[rid].required_flow_lpm, 1))

    def _interlock(self, s: Session, cid: str, rule: str, action: str, reason: str,
                   rep: PassReport, **extra: Any) -> None:
        payload = {"rule": rule, "action": action, "at": self.clock(), **extra}
        self.store.append_event(cid, INTERLOCK, payload, actor=self.actor, reason=reason,
                                session=s)
        rep.interlocks += 1

    # ------------------------------------------------------------------ slurm
    def _slurm(self, slurm: SlurmControl, rows: dict[str, _Row], rep: PassReport) -> None:
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
        if not drains and not resumes:
            return
        with self.store.session() as s:
            for reason, nodes in drains.items():
                slurm.drain([n for n, _ in nodes], reason)
                for n, tray in nodes:
                    self.store.append_event(tray, SLURM, {"action": "drain", "node": n},
                                            actor=self.actor, reason=reason, session=s)
                rep.slurm += len(nodes)
            if resumes:
                slurm.resume([n for n, _ in resumes])
                for n, tray in resumes:
                    self.store.append_event(tray, SLURM, {"action": "resume", "node": n},
                                            actor=self.actor, reason="back in production",
                                            session=s)
                rep.slurm += len(resumes)
