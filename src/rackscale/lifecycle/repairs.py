"""`lifecycle repair`: the way back for a part taken out of service.

A rack isolated by a coolant fault, a rack in maintenance or back from RMA, and a tray in
triage, repair or RMA return to service the same way: the operator records the repair, the
part goes back on the onboarding path (a rack to `cabled`: coolant check, power-on, firmware,
burn-in; a tray to `burn_in`), and only passing certification newer than the repair returns it
to production (the evidence gate counts the repair's transition into maintenance, repair or
onboard as the part's last repair). Until then nothing about the part is trusted.

The repair is refused, with what was measured, while the fault it should have fixed is still
there: the CDU reports a leak at the rack (or at the tray), or the rack's coolant flow or inlet
temperature is out of bounds. A rack whose valve the isolation closed is flow-tested first:
its valve is opened with the rack powered off, read, and closed again if the flow is short.

A repair may name the parts it fixed (`fixed`, inside the part repaired; none: all of it). It
is then refused while an open finding inside the part lies outside every fixed part: a
certification finding is open while it is its part's newest word, and only a repair that
covers it makes that word stale. Findings are taken at the part they name (a tray failed on its
dead GPU names the GPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from rackscale.errors import UserError
from rackscale.fleet import is_within
from rackscale.inputs import check_operator_text
from rackscale.lifecycle.interlocks import CoolantTier, coolant_fault, leak_tier
from rackscale.lifecycle.repository import set_goal, state_of
from rackscale.lifecycle.states import RACK, REPAIR_PATHS, RackState
from rackscale.lifecycle.writes import Writes
from rackscale.store import CertifyFindingV1, Kind

if TYPE_CHECKING:
    from rackscale.lifecycle.controller import Controller
    from rackscale.lifecycle.drivers import CduTelemetry

OPEN_SHOWN = 5  # open findings a refusal names (then a count)


class RepairRefused(UserError):
    """The part still shows the fault (or is not out of service): nothing changed."""


@dataclass(frozen=True, slots=True)
class RepairResult:
    component: str
    src: str
    path: tuple[str, ...]  # the states it passed through, the last is where it is now
    goal: str | None  # the rack's onboarding goal afterwards (None for a tray)
    flow_lpm: float | None  # the CDU's flow when the repair was checked (racks)
    next_step: str
    fixed: tuple[str, ...] = ()  # the parts it names as fixed (none: the whole part)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["from"], d["to"] = d.pop("src"), self.path[-1]
        d["path"], d["fixed"] = list(self.path), list(self.fixed)
        return d


def repair(ctl: Controller, cid: str, *, reason: str,
           fixed: Sequence[str] = ()) -> RepairResult:
    """Record the repair of `cid` (of the parts `fixed` inside it; none: all of it) and put it
    back on the onboarding path (RepairRefused while the fault is still measured, while an
    open finding lies outside what it fixed, or when the part is not out of service)."""
    reason = check_operator_text(reason)
    fixed = tuple(dict.fromkeys(fixed))
    row = state_of(ctl.store, cid)
    steps = REPAIR_PATHS[row.machine].get(row.state)
    if steps is None:
        states = ", ".join(REPAIR_PATHS[row.machine])
        raise RepairRefused(f"{cid} is {row.state}: repair returns a {row.machine} in "
                            f"{states} to service; nothing changed")
    rack = row.rack
    ctl.state.refresh(ctl.store)
    # Findings first: the coolant check may open a closed valve for its flow test, and a
    # refusal must leave the rack as it found it.
    _check_findings(ctl, cid, fixed)
    reading = _checked_reading(ctl, cid, rack, rack_repair=row.machine == RACK)
    w = Writes(ctl.store, ctl.state, actor="operator")
    src = row.state
    with w.for_unit(cid):
        for i, to in enumerate(steps):
            w.move(cid, row.machine, src, to, reason=f"repair: {reason}",
                   extra={"fixed": list(fixed)} if fixed and i == 0 else None)
            src = to
        if row.fault_tier != CoolantTier.NONE:
            w.fault(cid, None, CoolantTier.NONE)  # the fault it answered is repaired
    _, dropped = w.commit()
    if dropped:
        raise RepairRefused(f"{cid}: {dropped[cid]}; nothing changed")
    goal = None
    if row.machine == RACK:
        goal = RackState.PRODUCTION.value  # walked back by the controller, gated on evidence
        set_goal(ctl.store, [cid], goal)
    return RepairResult(
        component=cid, src=row.state, path=steps, goal=goal,
        flow_lpm=round(reading.flow_lpm, 1) if reading is not None else None,
        next_step=(f"`rackscale lifecycle run --until-idle` walks it to burn_in; then "
                   f"`rackscale certify run --scope {rack}`; a pass newer than this repair "
                   "returns it to production"), fixed=fixed)


def open_findings(ctl: Controller, cid: str) -> dict[str, str]:
    """The open findings inside `cid`, part -> in words. A part inside `cid` (itself
    included) whose newest certification failed on its own evidence has, as open findings,
    the failing findings of the run that certification rests on that lie inside it (a tray's
    dead GPUs); a part failed by its own result, with no such finding, is its own."""
    found: dict[str, str] = {}
    for part in ctl.state.failing_parts():
        cond = ctl.state.failing(part)
        if cond is None or not is_within(part, cid):
            continue
        mine = [] if cond.run_id is None else [
            (f.component, f) for ev in ctl.store.events_with(Kind.CERTIFY_FINDING, "run_id",
                                                             cond.run_id)
            if (f := ev.read(CertifyFindingV1)).verdict == "fail"
            and is_within(f.component, part)]
        for where, f in mine:
            found.setdefault(where, f"{f.kind}, stage {f.stage}, run {f.run_id}")
        if not mine:
            found[part] = f"{cond.message}, event {cond.seq}"
    return dict(sorted(found.items()))


def _check_findings(ctl: Controller, cid: str, fixed: tuple[str, ...]) -> None:
    """RepairRefused when a fixed part is not inside `cid`, or an open finding inside `cid`
    lies outside every fixed part (nothing to check when the repair covers all of `cid`)."""
    if not fixed:
        return
    for part in fixed:
        if part not in ctl.topo.index:
            raise RepairRefused(f"--fixed {part}: no such part in this fleet (name parts "
                                f"inside {cid}, e.g. `rackscale fleet show`); nothing changed")
        if not is_within(part, cid):
            raise RepairRefused(f"--fixed {part}: {part} is not part of {cid}; name parts "
                                "inside it; nothing changed")
    missed = {p: words for p, words in open_findings(ctl, cid).items()
              if not any(is_within(p, f) for f in fixed)}
    if not missed:
        return
    named = "; ".join(f"{p} ({words})" for p, words in list(missed.items())[:OPEN_SHOWN])
    more = f"; and {len(missed) - OPEN_SHOWN} more" if len(missed) > OPEN_SHOWN else ""
    raise RepairRefused(f"repair of {cid} refused: open finding(s) this repair does not "
                        f"address: {named}{more}; add --fixed for each part repaired, or "
                        f"leave --fixed out to record the repair of all of {cid}; nothing "
                        "changed")


def _checked_reading(ctl: Controller, cid: str, rack: str, *,
                     rack_repair: bool) -> CduTelemetry | None:
    """The rack's CDU reading once the repair may go ahead; RepairRefused while it still shows
    the fault. A closed valve hides the flow, so a rack's is opened for the test (the rack is
    powered off while out of service) and closed again when the flow is short."""
    reading = ctl.cooling.read().get(rack)
    if reading is None:
        return None  # no CDU telemetry for the rack: the onboarding coolant check decides
    if leak_tier(reading) is not None and (rack_repair or cid in reading.leaking_trays):
        where = ", ".join(sorted(reading.leaking_trays)) or "the rack (critical)"
        raise RepairRefused(f"repair of {cid} refused: the CDU of {rack} still reports a leak "
                            f"at {where}; nothing changed")
    if not rack_repair:
        return reading
    need, hot = ctl.racks[rack].required_flow_lpm, ctl.policy.max_inlet_c
    opened = not reading.valve_open
    if opened:
        ctl.cooling.set_valve(rack, True)
        reading = ctl.cooling.read()[rack]
    fault = coolant_fault(reading, need, hot)
    if fault is not None:
        if opened:
            ctl.cooling.set_valve(rack, False)
        raise RepairRefused(f"repair of {rack} refused: coolant still faulty ({fault}"
                            + (", measured with the valve opened for the test" if opened
                               else "") + "); nothing changed")
    return reading
