"""Certification evidence moves parts out of service and back, read from the fleet state.

The fleet state (`rackscale.state`) says what the newest certification of every tray and rack
is; this module acts on it, level-triggered (a pass re-reads the truth, so nothing depends on
having seen an event at the right moment):
- a tray whose newest certification failed (a GPU, NIC, CPU, DPU or NVSwitch finding, or its
  own failed result), newer than its last repair/triage -> triage;
- a rack whose newest certification failed (a finding on its NVLink switch tray, CDU, power
  shelf or the rack itself) -> a serving rack is cordoned (draining), a rack in bring-up goes
  to maintenance;
- then an NVL72 rack with more than 2 bad trays is cordoned (jobs on its NVLink domain
  tolerate two; an HGX node is its own domain and never cordons its rack);
- a leaf or spine finding moves no tray (the fabric is shared): the racks under it carry a
  FabricHealthy condition and a `lifecycle.noted` event records it.
`apply_findings` also notes, once per finding (a cursor over the log), what it moved nothing
for. `promote_passing` moves parts whose newest certification passed, newer than their last
repair/triage, to certified/production, and returns the parts evidence pulled (triaged trays,
racks cordoned on a finding, degraded racks whose trays are back) when newer evidence passes.
Both are idempotent: a second run changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rackscale.fleet import DEFAULT_MAX_BAD_TRAYS, Topology
from rackscale.lifecycle import repository
from rackscale.lifecycle.repository import NOTED, Row, repair_states
from rackscale.lifecycle.states import (
    BAD_TRAY_STATES,
    RACK,
    RACK_TRANSITIONS,
    TRAY,
    TRAY_TRANSITIONS,
    RackState,
    TrayState,
    serving_target,
    trays_out,
)
from rackscale.lifecycle.writes import Writes
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


def _cordon(w: Writes, rows: dict[str, Row], rack: str, reason: str,
            finding_seq: int | None = None) -> bool:
    row = rows[rack]
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
    _move(w, rows, rack, dst, reason, extra)
    return True


def _move(w: Writes, rows: dict[str, Row], cid: str, to: str, reason: str,
          extra: dict[str, Any] | None = None) -> None:
    """Queue the move and keep the in-memory row (and so the bad-tray counts) current."""
    row = rows[cid]
    w.move(cid, row.machine, row.state, to, reason=reason, extra=extra)
    row.state = str(to)


def _bad_trays(rows: dict[str, Row]) -> dict[str, int]:
    """Rack -> its trays in a bad state, counted over the rows once."""
    bad: dict[str, int] = {}
    for row in rows.values():
        if row.machine == TRAY and row.state in BAD_TRAY_STATES:
            bad[row.rack] = bad.get(row.rack, 0) + 1
    return bad


def _note_findings(store: Store, topo: Topology, w: Writes, start: int,
                   rep: TriageReport) -> int:
    """One `lifecycle.noted` event per new finding that moves nothing; returns the newest
    finding's seq (the cursor)."""
    events = store.events(kind=Kind.CERTIFY_FINDING, after_seq=start)
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
            w.event(cid, NOTED, {"finding_seq": ev.seq, "action": "none"}, reason=why)
            rep.noted.append(cid)
    return max((e.seq for e in events), default=start)


def _enforce(w: Writes, rows: dict[str, Row], state: FleetState,
             rep: TriageReport) -> set[str]:
    """Pull every tray and rack whose newest certification failed (newer than its last
    repair/triage) out of service; returns the racks touched."""
    touched: set[str] = set()
    for cid in state.failing_parts():
        row, cond = rows.get(cid), state.failing(cid)
        if row is None or cond is None or \
                cond.seq <= state.last_entered(cid, repair_states(row.machine)):
            continue  # a part without a lifecycle row (a GPU) is moved through its tray
        why = f"newest certification failed: {cond.message} (event {cond.seq})"
        with w.for_unit(row.rack):
            if row.machine == RACK:
                if _cordon(w, rows, cid, f"rack-level: {why}", cond.seq):
                    rep.racks_rack_level.append(cid)
                touched.add(cid)
                continue
            st = T(row.state)
            if st not in BAD_TRAY_STATES and T.TRIAGE in TRAY_TRANSITIONS[st]:
                _move(w, rows, cid, T.TRIAGE, why, {"finding_seq": cond.seq})
                rep.trays_triaged.append(cid)
        touched.add(row.rack)
    return touched


def apply_findings(store: Store, topo: Topology, *, after_seq: int | None = None,
                   actor: str = "lifecycle-triage", state: FleetState | None = None,
                   rows: dict[str, Row] | None = None) -> TriageReport:
    """Act on the fleet state's failing certifications; note new findings that move
    nothing. `state` is refreshed here (a new one is read when none is given); `rows` are
    the lifecycle rows as just read (read here when None), kept current as moves are queued.
    Every row is read once and every write goes into one batch (`Writes`): the cost is
    linear in the fleet."""
    rep = TriageReport()
    repository.open_store(store)
    state = state if state is not None else FleetState(topo)
    state.refresh(store)
    rows = rows if rows is not None else repository.read_rows(store)
    w = Writes(store, state, actor=actor)
    with store.session() as s:
        start = repository.cursor(s, CURSOR) if after_seq is None else after_seq
    newest = _note_findings(store, topo, w, start, rep)
    touched = _enforce(w, rows, state, rep)
    bad = _bad_trays(rows)
    for rack in sorted(touched):
        template = topo.rack(rack).template
        if not template.cordon_on_bad_trays:
            continue
        n, limit = bad.get(rack, 0), template.max_bad_trays
        with w.for_unit(rack):
            if n > limit and _cordon(w, rows, rack,
                                     f"{n} trays bad (> {limit}): NVL72 rack cordoned"):
                rep.racks_escalated.append(rack)
    if newest > start:
        w.call(lambda s: repository.set_cursor(s, CURSOR, newest))
    w.commit()
    return rep


def _tolerated(topo: Topology, rack: str) -> int:
    """Trays out the rack's template tolerates (the default for a rack the topology lacks)."""
    known = topo.rack_by_id.get(rack)
    return known.template.max_bad_trays if known is not None else DEFAULT_MAX_BAD_TRAYS


def _serving(topo: Topology, rack: str, bad: int) -> tuple[RackState | None, str]:
    """The serving state of a rack with `bad` trays out (None: cordoned) and those trays in
    its kind's words ("" with none out)."""
    known = topo.rack_by_id.get(rack)
    if known is None:  # a rack the topology lacks: the default tolerance
        return (R.PRODUCTION if bad == 0 else R.DEGRADED if bad <= DEFAULT_MAX_BAD_TRAYS
                else None), (f"{bad} trays out" if bad else "")
    template = known.template
    return serving_target(template, bad), trays_out(template, bad) if bad else ""


def _count(rep: TriageReport, key: str) -> None:
    rep.promoted[key] = rep.promoted.get(key, 0) + 1


def promote_passing(store: Store, topo: Topology, *, actor: str = "lifecycle-triage",
                    report: TriageReport | None = None, state: FleetState | None = None,
                    rows: dict[str, Row] | None = None) -> TriageReport:
    """Racks burn_in -> certified -> production and trays burn_in -> production, each only when
    its newest certification passed, newer than its last repair/triage (the batch's gate
    enforces it). Parts evidence pulled come back on newer passing evidence: a tray
    triaged on a finding (-> production on a serving rack, else burn_in), a rack cordoned on a
    finding (draining -> production), a degraded rack whose trays are all back."""
    rep = report or TriageReport()
    state = state if state is not None else FleetState(topo)
    state.refresh(store)
    rows = rows if rows is not None else repository.read_rows(store)
    w = Writes(store, state, actor=actor)

    def gate_open(cid: str) -> bool:
        return w.gate(cid, rows[cid].machine).open

    def move(cid: str, to: str, reason: str, key: str) -> None:
        with w.for_unit(rows[cid].rack):
            _move(w, rows, cid, to, reason)
        _count(rep, key)

    racks = sorted(cid for cid, row in rows.items() if row.machine == RACK)
    limit = {rid: _tolerated(topo, rid) for rid in racks}
    bad = _bad_trays(rows)
    for rid in racks:
        row, tolerated = rows[rid], limit[rid]
        if row.state == R.BURN_IN and gate_open(rid):
            move(rid, R.CERTIFIED, "passing certification on record", "rack_certified")
        target, out = _serving(topo, rid, bad.get(rid, 0))
        if row.state == R.CERTIFIED and target is not None and gate_open(rid):
            # with trays out it serves degraded at once, never production first
            move(rid, target, f"certified; {out}" if out else "certified",
                 "rack_production" if target == R.PRODUCTION else "rack_degraded")
        pulled = state.lifecycle.get(rid)
        if row.state == R.DRAINING and row.tier == 0 and pulled is not None \
                and pulled.finding_seq is not None and bad.get(rid, 0) <= tolerated \
                and gate_open(rid):
            move(rid, R.PRODUCTION, "newer passing certification after the finding that "
                 "cordoned it", "rack_returned")
    serving = {rid for rid in racks if rows[rid].state in SERVING}
    _trays_back(rows, state, serving, gate_open, move)
    bad = _bad_trays(rows)
    for rid in racks:
        row, n, tolerated = rows[rid], bad.get(rid, 0), limit[rid]
        if row.state == R.PRODUCTION and 0 < n <= tolerated:
            move(rid, R.DEGRADED, _serving(topo, rid, n)[1], "rack_degraded")
        elif row.state == R.DEGRADED and n == 0 and row.tier == 0 \
                and gate_open(rid):  # a coolant fault's power cap keeps it degraded
            move(rid, R.PRODUCTION, "every tray back in service", "rack_returned")
    w.commit()
    return rep


def _trays_back(rows: dict[str, Row], state: FleetState, serving: set[str],
                gate_open: Callable[[str], bool],
                move: Callable[[str, str, str, str], None]) -> None:
    """Trays in burn_in of a serving rack, and trays triage pulled on a finding, whose newest
    certification passed since."""
    for cid in sorted(rows):
        row = rows[cid]
        if row.machine != TRAY or row.state not in (T.BURN_IN, T.TRIAGE):
            continue
        if row.state == T.BURN_IN:
            if row.rack in serving and gate_open(cid):
                move(cid, T.PRODUCTION, "passing certification on record", "tray_production")
            continue
        pulled = state.lifecycle.get(cid)
        if pulled is None or pulled.finding_seq is None or not gate_open(cid):
            continue  # an operator's triage waits for the operator
        to = T.PRODUCTION if row.rack in serving else T.BURN_IN
        move(cid, to, "newer passing certification after the finding that triaged it",
             "tray_returned")


class PassTriage:
    """`apply_findings` then `promote_passing` between a controller's passes, over one read of
    the rows (a row another writer moved meanwhile fails the batch's compare-and-set and is
    read again next time). Both act only on the log and the rows, so a call after a pass that
    wrote nothing, with the log where the last call found it, would change nothing and is
    skipped: at 128k GPUs a quiet pass then costs one index lookup here, not two reads of
    34k rows."""

    def __init__(self, store: Store, topo: Topology, state: FleetState) -> None:
        self.store, self.topo, self.state = store, topo, state
        self._seen: int | None = None  # the log's newest seq as the last triage began

    def __call__(self, *, pass_wrote: bool = True,
                 rows: dict[str, Row] | None = None) -> TriageReport | None:
        """Triage now (None: skipped, nothing it reads has changed since the last call);
        `rows`: the rows as the caller just read them (read here when None)."""
        newest = self.store.newest_seq()
        if not pass_wrote and newest == self._seen:
            return None
        # Seen as of before triage's own writes: those (or another writer's landing during
        # triage) make the next call run once more, which finds nothing and settles.
        self._seen = newest
        rows = rows if rows is not None else repository.read_rows(
            repository.open_store(self.store))
        rep = apply_findings(self.store, self.topo, state=self.state, rows=rows)
        return promote_passing(self.store, self.topo, report=rep, state=self.state, rows=rows)
