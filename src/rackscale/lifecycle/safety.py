"""The controller's safety responses: what the leak and coolant interlocks do to a rack in
one pass (the rules and tiers themselves are in `interlocks.py`).

A leak acts at once (a critical or severe leak isolates the rack; one or two leaking trays are
shut down and sent to triage; a dry tray is released); a coolant fault steps through the
response tiers (cap, drain, power off, isolate) as each comes due, and a cleared fault lifts
them. `Controller` takes these from `SafetyResponses`; the writes they make (`_move`,
`_fault`, `_interlock`) and the power switching (`_all_off`) are the controller's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rackscale.lifecycle.drivers import CoolingDriver, PowerDriver
from rackscale.lifecycle.interlocks import (
    RESPONSE_STEPS,
    SEVERE_LEAK_TRAYS,
    CoolantTier,
    FaultPolicy,
    LeakTier,
    coolant_fault,
    leak_tier,
)
from rackscale.lifecycle.passes import RackPass
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    POWERED_RACK_STATES,
    RACK_TRANSITIONS,
    TRAY_TRANSITIONS,
    RackState,
    TrayState,
)

if TYPE_CHECKING:
    from rackscale.fleet import Rack

R, T = RackState, TrayState


class SafetyResponses:
    """Leak and coolant-fault responses of one rack in one pass (a mixin of `Controller`)."""

    power: PowerDriver
    cooling: CoolingDriver
    policy: FaultPolicy
    racks: dict[str, Rack]

    # The controller's writes (queued in the pass's batch) and power switching, which these
    # responses use (signatures in controller.py: `_all_off(r)`, `_move(cid, row, to, reason,
    # ps, **extra)`, `_fault(cid, row, since, tier, ps)`, `_interlock(cid, rule, action,
    # reason, ps, **extra)`, `_try_production(rid, row, ps, why)`).
    _all_off: Callable[[RackPass], None]
    _move: Callable[..., None]
    _fault: Callable[..., None]
    _interlock: Callable[..., None]
    _try_production: Callable[..., None]

    def _leak(self, r: RackPass) -> bool:
        """Leak interlocks: a critical or severe leak isolates the rack (True: nothing else
        runs for it this pass); 1-2 leaking trays are shut down; dry trays are released."""
        ps, rid, row, reading = r.ps, r.rid, r.row, r.reading
        rows, obs, now, rep = ps.rows, ps.obs, ps.now, ps.rep
        shelves, trays = r.shelves, r.trays
        any_on = any(obs.get(t) for t in (*shelves, *trays))

        lt = leak_tier(reading)
        if lt in (LeakTier.CRITICAL, LeakTier.SEVERE):
            legal = R.ISOLATED in RACK_TRANSITIONS[R(row.state)]
            if any_on or reading.valve_open or (legal and row.state != R.ISOLATED):
                self._all_off(r)
                if reading.valve_open:
                    self.cooling.set_valve(rid, False)
                    rep.commands += 1
                why = ("critical leak: valve closed" if lt == LeakTier.CRITICAL else
                       f"{len(reading.leaking_trays)} trays leaking (> {SEVERE_LEAK_TRAYS}): "
                       "rack isolated")
                self._interlock(rid, f"leak_{lt}", "isolate", why, ps,
                                trays=sorted(reading.leaking_trays))
                if legal and row.state != R.ISOLATED:
                    self._move(rid, row, R.ISOLATED, why, ps)
                self._fault(rid, row, row.since or now, CoolantTier.ISOLATE, ps)
            return True
        if lt == LeakTier.GENERAL:
            for tray in sorted(reading.leaking_trays):
                trow = rows.get(tray)
                if trow is None or trow.tier >= CoolantTier.OFF:
                    continue
                if obs.get(tray):
                    self.power.set_power(tray, False)
                    obs[tray] = False
                    rep.commands += 1
                why = f"leak at tray {tray}: tray shut down (1-2 leaking trays)"
                self._interlock(tray, "leak_general", "power_off_tray", why, ps)
                if T(trow.state) not in BAD_TRAY_STATES and T.TRIAGE in TRAY_TRANSITIONS[
                        T(trow.state)]:
                    self._move(tray, trow, T.TRIAGE, why, ps)
                self._fault(tray, trow, now, CoolantTier.OFF, ps)

        # a tray held off by a leak is released once it is dry and out of triage
        for tray in ps.held.intersection(trays) if ps.held else ():
            trow = rows[tray]
            if (trow.tier >= CoolantTier.OFF and tray not in reading.leaking_trays
                    and trow.state not in BAD_TRAY_STATES):
                self._fault(tray, trow, None, CoolantTier.NONE, ps)
        return False

    def _coolant(self, r: RackPass) -> None:
        """A coolant fault steps through the response tiers as each comes due; a cleared one
        lifts them."""
        ps, rid, row, reading = r.ps, r.rid, r.row, r.reading
        now, pol = ps.now, self.policy
        need = self.racks[rid].required_flow_lpm
        fault = coolant_fault(reading, need, pol.max_inlet_c)
        shelves_on = any(ps.obs.get(t) for t in r.shelves)
        if fault and (shelves_on or row.tier > 0):
            since = row.since if row.since is not None else now
            age = now - since
            tier = CoolantTier(row.tier)
            for step in RESPONSE_STEPS:
                if tier >= step:
                    continue
                if age < pol.due(step):
                    # not due yet: `--until-idle` waits for it rather than stopping here
                    ps.rep.due[rid] = (since + pol.due(step),
                                       f"coolant fault ({fault}): {step.name.lower()} step")
                    break
                self._step(r, step, fault)
                tier = step
            if tier != row.tier or row.since is None:
                self._fault(rid, row, since, tier, ps)
        elif not fault and row.tier > 0 and reading.valve_open:
            # (a closed valve reads no flow, which hides a flow fault rather than clearing
            # it: an isolated rack keeps its tier until `lifecycle repair`)
            cleared_from = row.tier
            self._fault(rid, row, None, CoolantTier.NONE, ps)
            self._interlock(rid, "coolant", "cleared", "coolant fault cleared", ps,
                            tier=int(cleared_from))
            if row.state in (R.DEGRADED, R.DRAINING) and cleared_from < CoolantTier.OFF:
                self._try_production(rid, row, ps, "coolant fault cleared")

    def _step(self, r: RackPass, step: CoolantTier, fault: str) -> None:
        """One step of the coolant-fault response, now due."""
        ps, rid, row, reading, rep = r.ps, r.rid, r.row, r.reading, r.ps.rep
        action = step.name.lower()
        self._interlock(rid, "coolant", action, f"coolant fault ({fault}): {action}", ps,
                        tier=int(step))
        if step == CoolantTier.CAP:
            self.power.set_cap(rid, self.policy.cap_fraction)
            rep.commands += 1
            if row.state == R.PRODUCTION:
                self._move(rid, row, R.DEGRADED, f"coolant fault ({fault}): power capped", ps)
        elif step == CoolantTier.DRAIN:
            if row.state in (R.PRODUCTION, R.DEGRADED):
                self._move(rid, row, R.DRAINING, f"coolant fault ({fault}): jobs drained", ps)
        elif step == CoolantTier.OFF:
            self._all_off(r)
            if R.MAINTENANCE in RACK_TRANSITIONS[R(row.state)] and row.state in POWERED_RACK_STATES:
                self._move(rid, row, R.MAINTENANCE,
                           f"coolant fault ({fault}): rack powered off", ps)
        elif step == CoolantTier.ISOLATE:
            if reading.valve_open:
                self.cooling.set_valve(rid, False)
                rep.commands += 1
            if R.ISOLATED in RACK_TRANSITIONS[R(row.state)]:
                self._move(rid, row, R.ISOLATED,
                           f"coolant fault ({fault}) unresolved: valve closed", ps)
