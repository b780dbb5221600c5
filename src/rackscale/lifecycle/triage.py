"""Certification findings move parts into triage; passing certification returns them.

`apply_findings` reads `certify.finding` events after a cursor (docs/contracts.md) and maps
each finding's component to lifecycle handling:
- a GPU, NIC, CPU, DPU (or an HGX node's NVSwitch) -> its tray/node goes to triage;
- a tray/node itself -> triage;
- an NVLink switch tray, the CDU, a power shelf or the rack -> rack-level: a serving rack is
  cordoned (draining), a rack still in bring-up goes to maintenance;
- a leaf or spine -> no tray moves (the fabric is shared); a `lifecycle.noted` event records it.
Then an NVL72 rack with more than 2 bad trays is cordoned (NVL72 jobs tolerate two).
`promote_passing` moves racks and trays with a passing `certify.result` newer than their last
repair/triage to certified/production. Both are idempotent: a second run changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from rackscale.fleet import DEFAULT_MAX_BAD_TRAYS, Topology, UnknownComponent
from rackscale.lifecycle import repository
from rackscale.lifecycle.repository import NOTED, LifecycleRow
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    RACK_TRANSITIONS,
    TRAY_TRANSITIONS,
    RackState,
    TrayState,
)
from rackscale.store import Store

R, T = RackState, TrayState
CURSOR = "certify.finding"


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


def _cordon(store: Store, s: Any, rack: str, reason: str, actor: str) -> bool:
    row = repository.get_row(s, rack)
    st = R(row.state)
    if st in (R.PRODUCTION, R.DEGRADED):
        dst = R.DRAINING
    elif st in (R.POWERED, R.FIRMWARE, R.BURN_IN, R.CERTIFIED):
        dst = R.MAINTENANCE
    else:
        return False  # already out of service (draining, maintenance, isolated, ...)
    if dst not in RACK_TRANSITIONS[st]:
        return False
    repository.transition(store, rack, dst, actor=actor, reason=reason, session=s)
    return True


def _bad_trays(s: Any, rack: str) -> int:
    q = select(LifecycleRow.state).where(LifecycleRow.rack == rack,
                                         LifecycleRow.machine == "tray")
    return sum(1 for st in s.scalars(q) if st in BAD_TRAY_STATES)


def apply_findings(store: Store, topo: Topology, *, after_seq: int | None = None,
                   actor: str = "lifecycle-triage") -> TriageReport:
    rep = TriageReport()
    repository.open_store(store)
    with store.session() as s:
        start = repository.cursor(s, CURSOR) if after_seq is None else after_seq
    events = store.events(kind="certify.finding", after_seq=start)
    rep.findings = len(events)
    touched: set[str] = set()
    with store.session() as s:
        def note(cid: str, seq: int, why: str) -> None:
            """A finding read and nothing moved: say why in the log."""
            store.append_event(cid, NOTED, {"finding_seq": seq, "action": "none"}, actor=actor,
                               reason=why, session=s)
            rep.noted.append(cid)

        for ev in events:
            cid = ev.payload.get("component") or ev.component_id
            kind = ev.payload.get("kind", "?")
            verdict = ev.payload.get("verdict", "fail")
            why = f"certify finding {kind} at {cid} (run {ev.payload.get('run_id', '?')}, " \
                  f"event {ev.seq})"
            try:
                holder = topo.holder(cid)
            except UnknownComponent:
                note(cid, ev.seq, "unknown component: not in this fleet")
                continue
            if verdict == "pass" or verdict == "warn":
                note(cid, ev.seq, f"verdict {verdict}: recorded, no move")
                continue
            if holder.level == "fabric":
                note(cid, ev.seq, f"{holder.kind} finding: shared fabric, no tray moves")
                continue
            if holder.level == "rack":
                rack = holder.rack or cid
                if _cordon(store, s, rack, f"rack-level: {why}", actor):
                    rep.racks_rack_level.append(rack)
                touched.add(rack)
                continue
            tray = holder.tray
            if tray is None:
                note(cid, ev.seq, f"{holder.kind} finding: no lifecycle handling")
                continue
            row = repository.get_row(s, tray)
            st = T(row.state)
            if st not in BAD_TRAY_STATES and T.TRIAGE in TRAY_TRANSITIONS[st]:
                repository.transition(store, tray, T.TRIAGE, actor=actor, reason=why, session=s,
                                  extra={"finding_seq": ev.seq})
                rep.trays_triaged.append(tray)
            if holder.rack:
                touched.add(holder.rack)
        for rack in sorted(touched):
            template = topo.rack(rack).template
            if not template.cordon_on_bad_trays:
                continue
            bad, limit = _bad_trays(s, rack), template.max_bad_trays
            if bad > limit and _cordon(store, s, rack,
                                       f"{bad} trays bad (> {limit}): NVL72 rack cordoned", actor):
                rep.racks_escalated.append(rack)
        if events:
            repository.set_cursor(s, CURSOR, max(e.seq for e in events))
    return rep


def _tolerated(topo: Topology, rack: str) -> int:
    """Trays out the rack's template tolerates (the default for a rack the topology lacks)."""
    return topo.rack(rack).template.max_bad_trays if rack in topo.index else DEFAULT_MAX_BAD_TRAYS


def promote_passing(store: Store, topo: Topology, *, actor: str = "lifecycle-triage",
                    report: TriageReport | None = None) -> TriageReport:
    """Racks burn_in -> certified -> production and trays burn_in -> production, each only with
    passing evidence newer than its last repair/triage (the state repository enforces the gate)."""
    rep = report or TriageReport()
    with store.session() as s:
        racks = list(s.scalars(select(LifecycleRow).where(LifecycleRow.machine == "rack")))
        limit = {row.component_id: _tolerated(topo, row.component_id) for row in racks}
        for row in racks:
            if row.state == R.BURN_IN and repository.passing_evidence(store, s, row) is not None:
                repository.transition(store, row.component_id, R.CERTIFIED, actor=actor, session=s,
                                  reason="passing certification on record")
                rep.promoted["rack_certified"] = rep.promoted.get("rack_certified", 0) + 1
            tolerated = limit[row.component_id]
            if row.state == R.CERTIFIED and _bad_trays(s, row.component_id) <= tolerated and \
                    repository.passing_evidence(store, s, row) is not None:
                repository.transition(store, row.component_id, R.PRODUCTION, actor=actor, session=s,
                                  reason=f"certified; <= {tolerated} trays out")
                rep.promoted["rack_production"] = rep.promoted.get("rack_production", 0) + 1
        serving = {r.component_id for r in racks if r.state in (R.PRODUCTION, R.DEGRADED)}
        trays = s.scalars(select(LifecycleRow).where(LifecycleRow.machine == "tray",
                                                     LifecycleRow.state == T.BURN_IN.value))
        for row in list(trays):
            if row.rack in serving and repository.passing_evidence(store, s, row) is not None:
                repository.transition(store, row.component_id, T.PRODUCTION, actor=actor,
                                  session=s, reason="passing certification on record")
                rep.promoted["tray_production"] = rep.promoted.get("tray_production", 0) + 1
        for row in racks:
            bad = _bad_trays(s, row.component_id)
            tolerated = limit[row.component_id]
            if row.state == R.PRODUCTION and 0 < bad <= tolerated:
                repository.transition(store, row.component_id, R.DEGRADED, actor=actor, session=s,
                                  reason=f"{bad} tray(s) out (<= {tolerated} tolerated by NVL72 "
                                         "jobs)")
                rep.promoted["rack_degraded"] = rep.promoted.get("rack_degraded", 0) + 1
    return rep
