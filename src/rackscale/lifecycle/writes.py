"""The lifecycle's writes of one pass, checked as they are queued and written together.

On day 1 a pass of the controller (or of triage) moves tens of thousands of racks and trays of
a 128k-GPU fleet. Each move used to be its own transaction with a read of the row, a read of
the log for the part's last repair and an INSERT: the pass cost a few milliseconds a move, and
the passes that onboard a fleet grew with the square of its size. `Writes` keeps the same rules
and the same guarantees with a fixed number of statements per pass:

- each move is checked when it is queued: the transition table (`states.check`) and, for
  certified/production, the evidence gate read from the fleet state (the part's last repair
  comes from `FleetState.entered`, and a part moved into a repair state earlier in the same
  batch is gated shut);
- `commit` writes every event in one bulk INSERT ... RETURNING, every move as one executemany
  UPDATE with a compare-and-set on the state it was read in, every fault-field change as
  another, and then checks that each moved row carries the seq of its last move. A row another
  writer moved since the pass read it fails that check: the whole transaction rolls back and
  the batch is written again unit by unit (a unit is one rack and its trays), each unit in its
  own transaction, so only the units that were raced are dropped (and reported), as the old
  per-rack transactions did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session

from rackscale.lifecycle.repository import (
    TRANSITION,
    LifecycleRow,
    StaleState,
    Transition,
    gated_payload,
    repair_states,
)
from rackscale.lifecycle.states import check
from rackscale.state import FleetState, Gate
from rackscale.store import Kind, NewEvent, Store

_CHUNK = 500  # ids per IN (...) of the check read: under every backend's parameter limit
# The Core table: executemany with a WHERE, no ORM objects.
_T = cast(Table, LifecycleRow.__table__)
_MOVE = (update(_T).where(_T.c.component_id == bindparam("b_cid"),
                          _T.c.state == bindparam("b_src"))
         .values(state=bindparam("b_dst"), seq=bindparam("b_seq"), updated=bindparam("b_now")))
_FAULT = (update(_T).where(_T.c.component_id == bindparam("b_cid"))
          .values(fault_since=bindparam("b_since"), fault_tier=bindparam("b_tier")))


@dataclass(slots=True)
class _Move:
    cid: str
    machine: str
    src: str
    dst: str


@dataclass(slots=True)
class _Entry:
    unit: str
    event: NewEvent | None = None
    move: _Move | None = None
    fault: tuple[str, float | None, int] | None = None
    call: Callable[[Session], None] | None = None


class _Raced(Exception):
    """Rows moved by another writer since the batch read them (internal: commit retries)."""

    def __init__(self, cids: list[str]) -> None:
        super().__init__(", ".join(cids))
        self.cids = cids


class Writes:
    """The moves, fault bookkeeping and events of one pass, queued per unit (a rack)."""

    def __init__(self, store: Store, state: FleetState, *, actor: str) -> None:
        self.store = store
        self.state = state
        self.actor = actor
        self.unit = ""
        self._entries: list[_Entry] = []
        self._repaired: set[str] = set()  # moved into a repair state in this batch

    def __len__(self) -> int:
        return len(self._entries)

    @contextmanager
    def for_unit(self, unit: str) -> Iterator[None]:
        """Queue what follows under `unit`; an exception drops the unit's entries."""
        self.unit, mark = unit, len(self._entries)
        try:
            yield
        except BaseException:
            del self._entries[mark:]
            raise
        finally:
            self.unit = ""

    # ------------------------------------------------------------------ queueing
    def gate(self, cid: str, machine: str) -> Gate:
        """The evidence gate of `cid` as this batch stands."""
        if cid in self._repaired:
            return Gate(None, "moved into a repair state in this pass; it needs new evidence")
        floor = self.state.last_entered(cid, repair_states(machine))
        return self.state.gate(cid, floor=floor)

    def move(self, cid: str, machine: str, src: str, to: str, *, reason: str,
             extra: dict[str, Any] | None = None) -> None:
        """Queue one legal transition (IllegalTransition / EvidenceMissing at once)."""
        check(machine, cid, src, to)
        payload = gated_payload(machine, cid, src, to, self.gate(cid, machine), extra)
        if to in {s.value for s in repair_states(machine)}:
            self._repaired.add(cid)
        self._entries.append(_Entry(self.unit, NewEvent(
            component_id=cid, kind=TRANSITION, payload=payload, actor=self.actor,
            reason=reason), _Move(cid, machine, src, to)))

    def event(self, cid: str, kind: Kind, payload: dict[str, Any], *, reason: str,
              actor: str | None = None) -> None:
        self._entries.append(_Entry(self.unit, NewEvent(
            component_id=cid, kind=kind, payload=payload, actor=actor or self.actor,
            reason=reason)))

    def fault(self, cid: str, since: float | None, tier: int) -> None:
        self._entries.append(_Entry(self.unit, fault=(cid, since, int(tier))))

    def call(self, fn: Callable[[Session], None]) -> None:
        """Run `fn` inside the batch's transaction (a consumer's cursor moves with what it
        wrote)."""
        self._entries.append(_Entry(self.unit, call=fn))

    # ------------------------------------------------------------------ writing
    def commit(self) -> tuple[list[Transition], dict[str, str]]:
        """Write the batch; returns the transitions written and the units dropped because
        another writer moved one of their rows (unit -> why). The batch is empty after."""
        entries, self._entries, self._repaired = self._entries, [], set()
        if not entries:
            return [], {}
        try:
            with self.store.session() as s:
                return self._write(s, entries), {}
        except _Raced:
            pass
        done: list[Transition] = []
        dropped: dict[str, str] = {}
        units: dict[str, list[_Entry]] = {}
        for e in entries:
            units.setdefault(e.unit, []).append(e)
        for unit, mine in units.items():
            try:
                with self.store.session() as s:
                    done += self._write(s, mine)
            except _Raced as err:
                dropped[unit] = str(StaleState(
                    f"{err}: moved by another writer since this pass read it; this rack's "
                    "writes were rolled back and it is read again next pass"))
        return done, dropped

    def _write(self, s: Session, entries: list[_Entry]) -> list[Transition]:
        logged = [e for e in entries if e.event is not None]
        seqs = self.store.append_events_seqs([e.event for e in logged if e.event], session=s)
        now = datetime.now(UTC)
        moves: list[dict[str, Any]] = []
        out: list[Transition] = []
        last: dict[str, int] = {}
        read_as: dict[str, str] = {}  # the state the pass read each moved row in
        for e, seq in zip(logged, seqs, strict=True):
            if e.move is not None:
                m = e.move
                moves.append({"b_cid": m.cid, "b_src": m.src, "b_dst": m.dst, "b_seq": seq,
                              "b_now": now})
                out.append(Transition(m.cid, m.machine, m.src, m.dst, seq))
                last[m.cid] = seq
                read_as.setdefault(m.cid, m.src)
        if moves:
            s.execute(_MOVE, moves)
            self._check_moved(s, last, read_as)
        faults = [{"b_cid": f[0], "b_since": f[1], "b_tier": f[2]}
                  for e in entries if (f := e.fault) is not None]
        if faults:
            s.execute(_FAULT, faults)
        for e in entries:
            if e.call is not None:
                e.call(s)
        return out

    @staticmethod
    def _check_moved(s: Session, last: dict[str, int], read_as: dict[str, str]) -> None:
        """Every moved row must carry its last move's seq: a compare-and-set that matched no
        row (another writer moved it) left the row's seq as that writer set it."""
        ids = list(last)
        raced: list[str] = []
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i:i + _CHUNK]
            have = {cid: (seq, state) for cid, seq, state in s.execute(
                select(_T.c.component_id, _T.c.seq, _T.c.state)
                .where(_T.c.component_id.in_(chunk)))}
            raced += [f"{cid} is {have[cid][1] if cid in have else 'gone'}, not "
                      f"{read_as[cid]}" for cid in chunk if have.get(cid, (0, ""))[0] != last[cid]]
        if raced:
            raise _Raced(raced)
