"""The lifecycle state repository: current state in a table of our own, history in the
store's event log.

Every transition writes a `lifecycle.transition` event and updates `lifecycle_state` in ONE
transaction, with a compare-and-set on the old state, so a crash (kill -9) can never leave the
table and the log disagreeing, and two writers can never both apply the same move.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, Float, Integer, String, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from rackscale.errors import UserError
from rackscale.fleet import COMPUTE_TRAY, NODE, Topology
from rackscale.lifecycle.states import (
    RACK,
    RACK_REPAIR_STATES,
    TRAY,
    TRAY_REPAIR_STATES,
    RackState,
    TrayState,
    check,
)
from rackscale.state import FleetState, Gate
from rackscale.store import (
    Base,
    Event,
    Kind,
    LifecycleInterlockV1,
    LifecycleNotedV1,
    LifecycleSlurmV1,
    LifecycleTransitionV1,
    NewEvent,
    Store,
    UTCDateTime,
    loaded_spec,
)

TRANSITION = Kind.LIFECYCLE_TRANSITION
INTERLOCK = Kind.LIFECYCLE_INTERLOCK
SLURM = Kind.LIFECYCLE_SLURM
NOTED = Kind.LIFECYCLE_NOTED
# States only passing certification evidence opens (for any actor: operator or controller).
EVIDENCE_GATED = frozenset({RackState.CERTIFIED.value, RackState.PRODUCTION.value})


class LifecycleRow(Base):
    """Current lifecycle state of one rack or tray (the log holds how it got there)."""

    __tablename__ = "lifecycle_state"

    component_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    machine: Mapped[str] = mapped_column(String(8))  # "rack" | "tray"
    rack: Mapped[str] = mapped_column(String(200), index=True)
    state: Mapped[str] = mapped_column(String(32))
    seq: Mapped[int] = mapped_column(Integer)  # event that set `state`
    goal: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # Coolant-fault bookkeeping (racks) / leak hold (trays); persisted so a restarted controller
    # keeps the fault's age and does not repeat a step it already took.
    fault_since: Mapped[float | None] = mapped_column(Float, nullable=True)
    fault_tier: Mapped[int] = mapped_column(Integer, default=0)
    updated: Mapped[datetime] = mapped_column(UTCDateTime)


class CursorRow(Base):
    """How far a consumer of other rooms' events (certify findings) has read the log."""

    __tablename__ = "lifecycle_cursor"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)


class UnknownLifecycleComponent(UserError):
    pass


class EvidenceMissing(UserError):
    pass


@dataclass(frozen=True, slots=True)
class Transition:
    component_id: str
    machine: str
    src: str
    dst: str
    seq: int


def open_store(store: Store) -> Store:
    """Make sure our tables exist (importing this module declared them on the store's Base)."""
    store.ensure_tables()
    return store


def enroll(store: Store, topo: Topology, *, actor: str = "rackscale",
           reason: str = "enrolled from inventory",
           have: Collection[str] | None = None) -> int:
    """Give every rack (received) and tray/node (onboard) of `topo` a lifecycle row if it has
    none. Idempotent; returns how many were enrolled. `have`: the ids with a row, as the
    caller just read them (`read_rows`); read here when None. A row another writer added
    meanwhile makes the insert fail on its key rather than enroll a part twice."""
    now = datetime.now(UTC)
    have = have if have is not None else read_rows(store).keys()
    with store.session() as s:
        new: list[tuple[str, str, str, str]] = []
        for rack in topo.racks:
            if rack.id not in have:
                new.append((rack.id, RACK, rack.id, RackState.RECEIVED.value))
            for j in range(rack.first, rack.end):
                if topo.kinds[j] in (COMPUTE_TRAY, NODE) and topo.ids[j] not in have:
                    new.append((topo.ids[j], TRAY, rack.id, TrayState.ONBOARD.value))
        if not new:
            return 0
        seqs = store.append_events_seqs(
            [NewEvent(component_id=cid, kind=TRANSITION, payload={"from": None, "to": st},
                      actor=actor, reason=reason, time=now) for cid, _, _, st in new],
            session=s)
        s.add_all([
            LifecycleRow(component_id=cid, machine=m, rack=rack, state=st, seq=seq,
                         goal=None, fault_since=None, fault_tier=0, updated=now)
            for (cid, m, rack, st), seq in zip(new, seqs, strict=True)
        ])
    return len(new)


@dataclass(slots=True)
class Row:
    """A lifecycle row as a pass reads it (plain values, no ORM object), kept current as the
    pass queues moves."""

    state: str
    goal: str | None
    since: float | None
    tier: int
    machine: str = RACK
    rack: str = ""


def read_rows(store: Store) -> dict[str, Row]:
    """Every lifecycle row in one SELECT. Raw DBAPI rows: at ~34k rows a pass the ORM's
    per-row cost would dominate."""
    with store.engine.connect() as conn:
        cur = conn.connection.cursor()  # the DBAPI cursor: plain tuples, no Row objects
        cur.execute("SELECT component_id, state, goal, fault_since, fault_tier, machine, rack "
                    "FROM lifecycle_state")
        raw = cur.fetchall()
        cur.close()
    return {cid: Row(state, goal, since, tier, machine, rack)
            for cid, state, goal, since, tier, machine, rack in raw}


def get_row(s: Session, cid: str) -> LifecycleRow:
    row = s.get(LifecycleRow, cid)
    if row is None:
        raise UnknownLifecycleComponent(
            f"unknown lifecycle component {cid!r}: not a rack or tray enrolled in the lifecycle; "
            "list them with `rackscale lifecycle status` (run `rackscale fleet load` and "
            "`rackscale lifecycle run --once` to enroll a fleet)"
        )
    return row


def trays_of(store: Store, rack: str) -> list[LifecycleRow]:
    """The lifecycle rows of a rack's trays, by id."""
    with store.session() as s:
        return list(s.scalars(select(LifecycleRow).where(
            LifecycleRow.rack == rack, LifecycleRow.machine == "tray")
            .order_by(LifecycleRow.component_id)))


def state_of(store: Store, cid: str) -> LifecycleRow:
    with store.session() as s:
        return get_row(s, cid)


def repair_states(machine: str) -> frozenset[RackState] | frozenset[TrayState]:
    """The states whose last entry makes a part's older certification evidence stale."""
    return RACK_REPAIR_STATES if machine == RACK else TRAY_REPAIR_STATES


def last_repair_seq(store: Store, s: Session, row: LifecycleRow) -> int:
    """Seq of the component's last move into a repair state, read from the log inside `s`
    (an operator's one move; a pass reads it from the fleet state, `FleetState.entered`).
    Enrollment (the first row, `from` None) is not a repair: hardware certified before the
    lifecycle knew it keeps that evidence, so `certify run` then `lifecycle run` promotes
    instead of waiting forever."""
    repair = {st.value for st in repair_states(row.machine)}
    for ev in store.events(component_id=row.component_id, kind=TRANSITION, newest_first=True,
                           session=s):
        moved = ev.read(LifecycleTransitionV1)
        if moved.to in repair and moved.from_ is not None:
            return ev.seq
    return 0


def fleet_state(store: Store) -> FleetState:
    """The fleet state of the fleet loaded in `store`, read up to its newest event (for a
    one-off move; a controller keeps one and refreshes it)."""
    spec = loaded_spec(store)
    if spec is None:
        raise EvidenceMissing(f"no fleet loaded in {store.safe_url}: there is no certification "
                              "evidence to move on; run `rackscale fleet load` first")
    return FleetState.load(store, Topology.build(spec))


def passing_evidence(store: Store, s: Session, row: LifecycleRow,
                     state: FleetState | None = None) -> int | None:
    """Seq of the certification evidence that lets the part (a rack or tray) enter certified
    or production, or None. The fleet state decides (`FleetState.gate`): the newest evidence
    of the part must pass, newer than its last repair/triage (a triage counts like a repair:
    evidence from before a finding must not send the part straight back to production)."""
    state = state if state is not None else fleet_state(store)
    return state.gate(row.component_id, floor=last_repair_seq(store, s, row)).evidence_seq


def why_not_serving(store: Store, s: Session, row: LifecycleRow,
                    state: FleetState) -> str:
    """What the gate says of a part it keeps out (for the controller's "waiting" list)."""
    return state.gate(row.component_id, floor=last_repair_seq(store, s, row)).why


def transition(store: Store, cid: str, to: str, *, actor: str, reason: str,
               session: Session | None = None, expect: str | None = None,
               extra: dict[str, Any] | None = None,
               state: FleetState | None = None) -> Transition:
    """Apply one legal transition: table check, production evidence gate (read from `state`,
    or from the store's fleet state when none is given), compare-and-set on the state row and
    the event, all in one transaction."""
    if not reason.strip():
        raise UserError("a transition needs a reason (--reason ...)")
    if session is None:
        with store.session() as s:
            return transition(store, cid, to, actor=actor, reason=reason, session=s,
                              expect=expect, extra=extra, state=state)
    s = session
    row = get_row(s, cid)
    src = row.state
    if expect is not None and src != expect:
        raise _stale(cid, src, expect)
    check(row.machine, cid, src, to)
    gate = None
    if to in EVIDENCE_GATED:
        state = state if state is not None else fleet_state(store)
        gate = state.gate(cid, floor=last_repair_seq(store, s, row))
    payload = gated_payload(row.machine, cid, src, to, gate, extra)
    seq = store.append_event(cid, TRANSITION, payload, actor=actor, reason=reason, session=s)
    res = s.execute(update(LifecycleRow)
                    .where(LifecycleRow.component_id == cid, LifecycleRow.state == src)
                    .values(state=to, seq=seq, updated=datetime.now(UTC)))
    if cast(CursorResult[Any], res).rowcount != 1:  # moved by another writer since our read
        raise _stale(cid, "changed concurrently", src)
    s.expire(row)
    return Transition(cid, row.machine, src, to, seq)


def gated_payload(machine: str, cid: str, src: str, to: str, gate: Gate | None,
                  extra: dict[str, Any] | None) -> dict[str, Any]:
    """A transition event's payload; a move into certified or production carries the evidence
    its gate found, and without one is refused (the one wording of that refusal)."""
    payload: dict[str, Any] = {"from": src, "to": to}
    if to in EVIDENCE_GATED:
        if gate is None or gate.evidence_seq is None:
            why = gate.why if gate is not None else "no certification was consulted"
            raise EvidenceMissing(
                f"{machine} {cid} cannot become {to}: {why}. It needs a passing "
                "certification newer than its last repair/triage, and no newer failing one; "
                "certify it with `rackscale certify run` (it records certify.result events in "
                "this --db)"
            )
        payload["evidence_seq"] = gate.evidence_seq
    if extra:
        payload.update(extra)
    return payload


class StaleState(UserError):
    pass


def _stale(cid: str, actual: str, expected: str) -> StaleState:
    return StaleState(f"{cid} is {actual}, not {expected}; nothing changed")


def set_goal(store: Store, ids: Iterable[str], goal: str | None) -> None:
    with store.session() as s:
        for cid in ids:
            get_row(s, cid).goal = goal


def history_events(store: Store, cid: str) -> list[Event]:
    """Every lifecycle event of `cid`, oldest first (UnknownLifecycleComponent if it has no
    lifecycle)."""
    with store.session() as s:
        get_row(s, cid)
    return store.events(component_id=cid, kind_prefix="lifecycle.")


def history(store: Store, cid: str) -> list[dict[str, Any]]:
    """`history_events` as JSON objects (the API's and `history --json`'s rows)."""
    return [e.as_dict() for e in history_events(store, cid)]


def moved(ev: Event) -> tuple[str | None, str | None]:
    """A lifecycle event's (from, to): a transition's states, (None, None) for the others."""
    data = ev.data
    if isinstance(data, LifecycleTransitionV1):
        return data.from_, data.to
    return None, None


def change_of(ev: Event) -> str:
    """A lifecycle event in a few words: a move's `from -> to`, an interlock's rule and
    action, a Slurm drain's or a noted finding's action."""
    data = ev.data
    if isinstance(data, LifecycleTransitionV1):
        return f"{data.from_} -> {data.to}"
    rule = data.rule if isinstance(data, LifecycleInterlockV1) else ""
    action = data.action if isinstance(
        data, LifecycleInterlockV1 | LifecycleSlurmV1 | LifecycleNotedV1) else ""
    return f"{rule} {action}".strip()


def cursor(s: Session, name: str) -> int:
    row = s.get(CursorRow, name)
    return row.seq if row else 0


def set_cursor(s: Session, name: str, seq: int) -> None:
    row = s.get(CursorRow, name)
    if row is None:
        s.add(CursorRow(name=name, seq=seq))
    else:
        row.seq = seq


def counts(store: Store) -> dict[str, dict[str, int]]:
    """{"rack": {state: n}, "tray": {state: n}}."""
    out: dict[str, dict[str, int]] = {RACK: {}, TRAY: {}}
    with store.session() as s:
        for machine, state in s.execute(select(LifecycleRow.machine, LifecycleRow.state)):
            out[machine][state] = out[machine].get(state, 0) + 1
    return out
