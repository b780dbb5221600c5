"""Certification evidence moves parts out of service and back, read from the fleet state.

The fleet state (`rackscale.state`) says what the newest certification of every tray and rack
is; this module acts on it, level-triggered (a pass re-reads the truth, so nothing depends on
having seen an event at the right moment):
- a tray whose newest certification failed (a GPU, NIC, CPU, DPU or NVSwitch finding, or its
  own failed result), newer than its last repair/triage -> triage;
- a rack whose newest certification failed (a finding on its NVLink switch tray, CDU, power
  shelf or the rack itself) -> a serving rack is cordoned (draining), a rack in bring-up goes
  to maintenance;
- then an NVL72 rack with more than 2 bad trays is cordoned (NVL72 jobs tolerate two);
- a leaf or spine finding moves no tray (the fabric is shared): the racks under it carry a
  FabricHealthy condition and a `lifecycle.noted` event records it.
`apply_findings` also notes, once per finding (a cursor over the log), what it moved nothing
for. `promote_passing` moves parts whose newest certification passed, newer than their last
repair/triage, to certified/production, and returns the parts evidence pulled (triaged trays,
racks cordoned on a finding, degraded racks whose trays are back) when newer evidence passes.
Both are idempotent: a second run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from rackscale.fleet import DEFAULT_MAX_BAD_TRAYS, Topology
from rackscale.lifecycle import repository
from rackscale.lifecycle.repository import NOTED, LifecycleRow
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    RACK_TRANSITIONS,
    TRAY_TRANSITIONS,
    RackState,
    TrayState,
)
from rackscale.state import FleetState
from rackscale.store import CertifyFindingV1, Kind, Store

R, T = RackState, TrayState
CURSOR = "certify.finding"
SERVING = (R.PRODUCTION, R.DEGRADED)


@dataclass(slots=True)
class TriageReport:
    findings: int = 0
    trays_triaged: list[str] = field(default_factory=list)
    racks_rack_level: list[str] = field(default_factory=list)
    racks_escalated: list[str] = field(default_factory=list)
    noted: list[str] = field(default_factory=list)
    promoted: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"findings": self.findings, "trays_triaged": self.trays_triaged,
                "racks_rack_level": self.racks_rack_level,
                "racks_escalated": self.racks_escalated, "noted": self.noted,
                "promoted": self.promoted}


def _cordon(store: Store, s: Any, rack: str, reason: str, actor: str,
            finding_seq: int | None = None) -> bool:
    row = repository.get_row(s, rack)
    st = R(row.state)
    if st in SERVING:
        dst = R.DRAINING
    elif st in (R.POWERED, R.FIRMWARE, R.BURN_IN, R.CERTIFIED):
        dst = R.MAINTENANCE
    else:
        return False  # already out of service (draining, maintenance, isolated, ...)
    if dst not in RACK_TRANSITIONS[st]:
        return False
    extra = None if finding_seq is None else {"finding_seq": finding_seq}
    repository.transition(store, rack, dst, actor=actor, reason=reason, session=s, extra=extra)
    return True


def _bad_trays(s: Any, rack: str) -> int:
    q = select(LifecycleRow.state).where(LifecycleRow.rack == rack,
                                         LifecycleRow.machine == "tray")
    return sum(1 for st in s.scalars(q) if st in BAD_TRAY_STATES)


def _note_findings(store: Store, topo: Topology, s: Any, start: int, actor: str,
                   rep: TriageReport) -> int:
    """One `lifecycle.noted` event per new finding that moves nothing; returns the newest
    finding's seq (the cursor)."""
    events = store.events(kind=Kind.CERTIFY_FINDING, after_seq=start, session=s)
    rep.findings = len(events)
    for ev in events:
        p = ev.read(CertifyFindingV1)
        cid = p.component or ev.component_id
        why = None
        if cid not in topo.index:
            why = "unknown component: not in this fleet"
        elif p.verdict != "fail":
            why = f"verdict {p.verdict}: recorded, no move"
        else:
            holder = topo.holder(cid)
            if holder.level == "fabric":
                why = f"{holder.kind} finding: shared fabric, no tray moves"
            elif holder.level == "region":
                why = f"{holder.kind} finding: no lifecycle handling"
        if why is not None:
            store.append_event(cid, NOTED, {"finding_seq": ev.seq, "action": "none"},
                               actor=actor, reason=why, session=s)
            rep.noted.append(cid)
    return max((e.seq for e in events), default=start)


def _enforce(store: Store, s: Any, state: FleetState, actor: str, rep: TriageReport) -> set[str]:
    """Pull every tray and rack whose newest certification failed (newer than its last
    repair/triage) out of service; returns the racks touched."""
    touched: set[str] = set()
    rows = s.scalars(select(LifecycleRow).order_by(LifecycleRow.component_id))
    for row in list(rows):
        cond = state.failing(row.component_id)
        if cond is None or cond.seq <= repository.last_repair_seq(store, s, row):
            continue
        why = f"newest certification failed: {cond.message} (event {cond.seq})"
        if row.machine == "rack":
            if _cordon(store, s, row.component_id, f"rack-level: {why}", actor, cond.seq):
                rep.racks_rack_level.append(row.component_id)
            touched.add(row.component_id)
            continue
        st = T(row.state)
        if st not in BAD_TRAY_STATES and T.TRIAGE in TRAY_TRANSITIONS[st]:
            repository.transition(store, row.component_id, T.TRIAGE, actor=actor, reason=why,
                                  session=s, extra={"finding_seq": cond.seq})
            rep.trays_triaged.append(row.component_id)
        touched.add(row.rack)
    return touched


def apply_findings(store: Store, topo: Topology, *, after_seq: int | None = None,
                   actor: str = "lifecycle-triage",
                   state: FleetState | None = None) -> TriageReport:
    """Act on the fleet state's failing certifications; note new findings that move
    nothing. `state` is refreshed here (a new one is read when none is given)."""
    rep = TriageReport()
    repository.open_store(store)
    state = state if state is not None else FleetState(topo)
    state.refresh(store)
    with store.session() as s:
        start = repository.cursor(s, CURSOR) if after_seq is None else after_seq
        newest = _note_findings(store, topo, s, start, actor, rep)
        touched = _enforce(store, s, state, actor, rep)
        for rack in sorted(touched):
            template = topo.rack(rack).template
            if not template.cordon_on_bad_trays:
                continue
            bad, limit = _bad_trays(s, rack), template.max_bad_trays
            if bad > limit and _cordon(store, s, rack,
                                       f"{bad} trays bad (> {limit}): NVL72 rack cordoned", actor):
                rep.racks_escalated.append(rack)
        if newest > start:
            repository.set_cursor(s, CURSOR, newest)
    return rep


def _tolerated(topo: Topology, rack: str) -> int:
    """Trays out the rack's template tolerates (the default for a rack the topology lacks)."""
    return topo.rack(rack).template.max_bad_trays if rack in topo.index else DEFAULT_MAX_BAD_TRAYS


def _count(rep: TriageReport, key: str) -> None:
    rep.promoted[key] = rep.promoted.get(key, 0) + 1


def promote_passing(store: Store, topo: Topology, *, actor: str = "lifecycle-triage",
                    report: TriageReport | None = None,
                    state: FleetState | None = None) -> TriageReport:
    """Racks burn_in -> certified -> production and trays burn_in -> production, each only when
    its newest certification passed, newer than its last repair/triage (the state repository
    enforces the gate). Parts evidence pulled come back on newer passing evidence: a tray
    triaged on a finding (-> production on a serving rack, else burn_in), a rack cordoned on a
    finding (draining -> production), a degraded rack whose trays are all back."""
    rep = report or TriageReport()
    state = state if state is not None else FleetState(topo)
    state.refresh(store)
    with store.session() as s:
        def gate_open(row: LifecycleRow) -> bool:
            return repository.passing_evidence(store, s, row, state) is not None

        def move(row: LifecycleRow, to: str, reason: str, key: str) -> None:
            repository.transition(store, row.component_id, to, actor=actor, session=s,
                                  reason=reason, state=state)
            _count(rep, key)

        racks = list(s.scalars(select(LifecycleRow).where(LifecycleRow.machine == "rack")))
        limit = {row.component_id: _tolerated(topo, row.component_id) for row in racks}
        for row in racks:
            rid, tolerated = row.component_id, limit[row.component_id]
            if row.state == R.BURN_IN and gate_open(row):
                move(row, R.CERTIFIED, "passing certification on record", "rack_certified")
            if row.state == R.CERTIFIED and _bad_trays(s, rid) <= tolerated and gate_open(row):
                move(row, R.PRODUCTION, f"certified; <= {tolerated} trays out",
                     "rack_production")
            pulled = state.lifecycle.get(rid)
            if row.state == R.DRAINING and row.fault_tier == 0 and pulled is not None \
                    and pulled.finding_seq is not None and _bad_trays(s, rid) <= tolerated \
                    and gate_open(row):
                move(row, R.PRODUCTION, "newer passing certification after the finding that "
                     "cordoned it", "rack_returned")
        serving = {r.component_id for r in racks if r.state in SERVING}
        _trays_back(s, state, serving, gate_open, move)
        for row in racks:
            bad = _bad_trays(s, row.component_id)
            tolerated = limit[row.component_id]
            if row.state == R.PRODUCTION and 0 < bad <= tolerated:
                move(row, R.DEGRADED, f"{bad} tray(s) out (<= {tolerated} tolerated by NVL72 "
                     "jobs)", "rack_degraded")
            elif row.state == R.DEGRADED and bad == 0 and row.fault_tier == 0 \
                    and gate_open(row):  # a coolant fault's power cap keeps it degraded
                move(row, R.PRODUCTION, "every tray back in service", "rack_returned")
    return rep


def _trays_back(s: Any, state: FleetState, serving: set[str], gate_open: Any,
                move: Any) -> None:
    """Trays in burn_in of a serving rack, and trays triage pulled on a finding, whose newest
    certification passed since."""
    q = select(LifecycleRow).where(LifecycleRow.machine == "tray",
                                   LifecycleRow.state.in_([T.BURN_IN.value, T.TRIAGE.value]))
    for row in list(s.scalars(q)):
        if row.state == T.BURN_IN:
            if row.rack in serving and gate_open(row):
                move(row, T.PRODUCTION, "passing certification on record", "tray_production")
            continue
        pulled = state.lifecycle.get(row.component_id)
        if pulled is None or pulled.finding_seq is None or not gate_open(row):
            continue  # an operator's triage waits for the operator
        to = T.PRODUCTION if row.rack in serving else T.BURN_IN
        move(row, to, "newer passing certification after the finding that triaged it",
             "tray_returned")
