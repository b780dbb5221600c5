"""Reports of the store as it stood at an earlier point, for `report diff` of two runs.

A point is named the way an operator knows it: a certification run id (the store as it stood
just before the next certification run, so with the triage and simulation that followed the
run), a simulation run id (up to just before the next certification run or simulation run of
its fleet), `seq:N` (up to event N) or `latest`. The event log is append-only, so the store
read up to a point gives the report that was (or would have been) built then; the inventory
and the fleet spec are the exceptions (the store keeps only the current ones), and a report
of a point says when they changed since.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rackscale.errors import UserError
from rackscale.report.build import report_document
from rackscale.report.ledger import JobShape
from rackscale.store import (
    CertifyRunV1,
    Event,
    FleetLoadedV1,
    InvalidPayload,
    Kind,
    SimulateRunV1,
    Store,
)

LATEST = "latest"
SEQ_PREFIX = "seq:"
RUNS_LISTED = 8  # newest runs named in the error for an unknown one


class StorePointError(UserError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class StorePoint:
    """A point of the event log: the report of the store up to event `until_seq`."""

    ref: str  # as the operator gave it
    until_seq: int
    what: str  # in words, for the diff's header


# run kind -> (the run kinds whose next run ends its point, its name in words)
RUN_KINDS: dict[Kind, tuple[tuple[Kind, ...], str]] = {
    Kind.CERTIFY_RUN: ((Kind.CERTIFY_RUN,), "certification run"),
    Kind.SIMULATE_RUN: ((Kind.CERTIFY_RUN, Kind.SIMULATE_RUN), "simulation run")}
# kinds that carry a certification run's run_id besides the run itself, written with it in
# either order
RUN_PARTS: dict[str, tuple[Kind, ...]] = {
    Kind.CERTIFY_RUN: (Kind.CERTIFY_FINDING, Kind.CERTIFY_RESULT)}


def _run_id(run: Event) -> str | None:
    """The run id of a certify.run or simulate.run event; None for a simulate.run that does
    not fit its contract (written before the store checked payloads: the report says so and
    does not apply it, and it cannot be named)."""
    try:
        data = run.data
    except InvalidPayload:
        return None
    return data.run_id if isinstance(data, CertifyRunV1 | SimulateRunV1) else None


def _start(store: Store, run: Event) -> int:
    """The seq of the first event of `run`: its own, or its first part's."""
    rid = _run_id(run)
    parts = [e.seq for k in RUN_PARTS.get(run.kind, ())
             for e in store.events_with(k, "run_id", rid, limit=1)]
    return min([run.seq, *parts])


def _next(store: Store, after: Event, kinds: tuple[Kind, ...]) -> tuple[int, Event] | None:
    """(first seq, run event) of the first run after `after` of one of `kinds` (a
    simulation run only of `after`'s fleet), or None."""
    found = [(_start(store, e), e) for k in kinds for e in store.events(
        kind=k, after_seq=after.seq, limit=1,
        component_id=after.component_id if k == Kind.SIMULATE_RUN else None)]
    return min(found, key=lambda x: x[0], default=None)


def _run_point(store: Store, ref: str, newest: int) -> StorePoint | None:
    for kind, (ends, name) in RUN_KINDS.items():
        # Run events are few; filtered here, not by SQLite's json_extract, which refuses the
        # `Infinity` a simulation's figures may hold (a job that never failed).
        runs = [e for e in store.events(kind=kind) if _run_id(e) == ref]
        if not runs:
            continue
        run = runs[-1]
        nxt = _next(store, run, ends)
        until = newest if nxt is None else nxt[0] - 1
        before = "now" if nxt is None else (f"before the {RUN_KINDS[Kind(nxt[1].kind)][1]} "
                                            f"{_run_id(nxt[1])}")
        return StorePoint(ref=ref, until_seq=until,
                          what=f"{name} {ref} (event seq {run.seq}) and what followed it: the "
                          f"store up to event seq {until} ({before})")
    return None


def _unknown(store: Store, ref: str) -> StorePointError:
    named = []
    for kind, name in ((Kind.CERTIFY_RUN, "certification runs"),
                       (Kind.SIMULATE_RUN, "simulation runs")):
        runs = store.events(kind=kind, newest_first=True, limit=RUNS_LISTED)
        ids = ", ".join(f"{_run_id(e)} (seq {e.seq})" for e in runs)
        named.append(f"{name}: {ids or 'none'}")
    return StorePointError(
        f"{ref!r} is not a report.json file nor a run in {store.safe_url}; {'; '.join(named)}. "
        f"Give a run id, {SEQ_PREFIX}N (the store up to event N), {LATEST}, or the path of a "
        "report.json")


def resolve_point(store: Store, ref: str) -> StorePoint:
    """The point of the event log `ref` names (a run id, seq:N or latest)."""
    newest = store.newest_seq()
    if ref == LATEST:
        return StorePoint(ref=ref, until_seq=newest, what=f"the store now (event seq {newest})")
    if ref.startswith(SEQ_PREFIX):
        text = ref[len(SEQ_PREFIX):]
        if not text.isdigit() or not 1 <= int(text) <= newest:
            raise StorePointError(f"{ref!r}: give {SEQ_PREFIX}N with N an event seq from 1 to "
                                  f"{newest} (the newest event of {store.safe_url})")
        return StorePoint(ref=ref, until_seq=int(text),
                          what=f"the store up to event seq {int(text)}")
    point = _run_point(store, ref, newest)
    if point is None:
        raise _unknown(store, ref)
    return point


def _changed_since(store: Store, point: StorePoint, fleet: str) -> list[str]:
    """Warnings for what a report of an earlier point cannot take as it was then."""
    later = [e for e in store.events(kind=Kind.FLEET_LOADED, component_id=fleet,
                                     after_seq=point.until_seq)
             if e.read(FleetLoadedV1).changed]
    if not later:
        return []
    return [f"report of {point.ref}: the fleet {fleet} was loaded again with changes after "
            f"it (event seq {', '.join(str(e.seq) for e in later)}); the store keeps only "
            "the current inventory and fleet spec, so this report counts today's"]


def document_at(store: Store, point: StorePoint, *, shape: JobShape | None = None,
                fleet: str | None = None) -> dict[str, Any]:
    """The report document of the store as it stood at `point`."""
    doc, _ = report_document(store, shape=shape, fleet=fleet, until_seq=point.until_seq)
    doc["warnings"] += _changed_since(store, point, doc["fleet"]["fleet"])
    return doc
