"""What the API, the dashboard and /metrics read: one consistent snapshot of the store.

The snapshot is the report's own read (`report.ledger_now`, read-only), so the dashboard and the
report can never disagree on a number, plus the fleet state's conditions at the same seq
(`rackscale.state`, read on incrementally between snapshots). It is rebuilt only when the event log
has moved (every state change appends an event). Requests never query the store for that: the
newest event is looked up by a background thread at most every SEQ_CHECK_S, and a reader gets
the snapshot in memory, with its hot responses serialized once (`Snapshot.encoded`).

A big build runs in a child process at lower priority (see `build`). Whatever is built or
taken in here allocates many objects in one thread that shares the interpreter lock with the
request threads, so it runs with the cyclic collector paused and a short switch interval
(`_quiet_build`), and what it made is then frozen out of the collector's reach (`gc.freeze`):
a snapshot is immutable and acyclic, and the request threads' small garbage is collected as
before without re-walking it.
"""

from __future__ import annotations

import gc
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from rackscale.fleet import Topology
from rackscale.redact import redact
from rackscale.report import Ledger
from rackscale.server.build import UNENROLLED, BuildError, Parts, build_in_child, build_parts
from rackscale.state import FleetState, Status
from rackscale.store import Store, loaded_spec

log = logging.getLogger("rackscale.server")
# A build that took longer than this runs in a child process the next time (starting one costs
# about a second: a small fleet builds faster in place).
CHILD_AFTER_S = 1.0
SEQ_CHECK_S = 0.1  # how often (at most) a reader's get() has the newest event looked up
WORKER_IDLE_S = 30.0  # the background worker ends after this long without a reader
# While a snapshot builds, a request thread waits at most this long for the interpreter lock
# (the default, 5 ms, is paid at every hand-over and adds up to tens of ms per request).
BUILD_SWITCH_INTERVAL_S = 0.0005
MAX_ENCODED = 256  # serialized responses kept per snapshot (distinct page/filter params)


def dumps(obj: Any) -> bytes:
    """JSON exactly as FastAPI's default response renders it."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, indent=None,
                      separators=(",", ":")).encode("utf-8")


@dataclass(slots=True, kw_only=True)
class Snapshot:
    seq: int  # the newest event this snapshot has seen
    built_s: float
    fleet: str
    ledger: Ledger  # the report's ledger (its per-GPU rows left out)
    racks: list[dict[str, Any]]
    rack_index: dict[str, int]
    # (lifecycle state, region, sku) -> GPUs; a GPU's state is its tray's
    gpu_counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # Derived views (rack briefs, the summary) computed once per snapshot, not per request:
    # a 1,778-rack fleet is then a list slice per page.
    memo: dict[str, Any] = field(default_factory=dict)
    bodies: dict[str, bytes] = field(default_factory=dict)  # see encoded()
    # Raw "path?query" of a GET a route answered 200 from `bodies` -> that body (app.HotReads)
    answered: dict[str, bytes] = field(default_factory=dict)
    built_pid: int = 0  # the process that built it (a child's for a big fleet)
    # The fleet state's conditions at `seq` (rackscale.state): per rack its own, per tray or
    # node only those that are not true (a fleet's trays are tens of thousands).
    conditions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # Each rack's lifecycle state in the same fleet state at `seq` (UNENROLLED: none yet).
    rack_states: dict[str, str] = field(default_factory=dict)
    # rack -> tray state -> trays, from the fleet state (the tray-state metric)
    tray_states: dict[str, dict[str, int]] = field(default_factory=dict)
    racks_per_leaf: int = 2  # the fleet spec's, for the dashboard's rack groups

    @classmethod
    def of(cls, parts: Parts) -> Snapshot:
        racks = parts.ledger.racks
        return cls(seq=parts.seq, built_s=parts.built_s, fleet=parts.fleet, ledger=parts.ledger,
                   racks=racks, rack_index={r["id"]: i for i, r in enumerate(racks)},
                   gpu_counts=parts.gpu_counts, built_pid=parts.pid)

    def derived(self, key: str, build: Callable[[Snapshot], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = build(self)  # a race only builds the same value twice
        return self.memo[key]

    def encoded(self, key: str, build: Callable[[Snapshot], Any]) -> bytes:
        """`build(self)` as JSON bytes, serialized once per snapshot and `key` (a new event
        means a new snapshot, so a cached body can never outlive the state it shows). At most
        MAX_ENCODED keys are kept: past that (many distinct page parameters) it is built per
        request, as any other response."""
        body = self.bodies.get(key)
        if body is None:
            body = dumps(build(self))
            if len(self.bodies) < MAX_ENCODED:
                self.bodies[key] = body
        return body

    def remember(self, raw_target: str, body: bytes) -> None:
        """Note that a route answered this exact request target with `body` (bounded)."""
        if len(self.answered) < MAX_ENCODED:
            self.answered[raw_target] = body

    def rack(self, rack_id: str) -> dict[str, Any] | None:
        i = self.rack_index.get(rack_id)
        return None if i is None else self.racks[i]

    def gpu_total(self) -> int:
        return sum(self.gpu_counts.values())


_quiet_lock = threading.Lock()
_quiet: dict[str, Any] = {"depth": 0}  # builds in progress (several caches in one process)


@contextmanager
def _quiet_build() -> Iterator[None]:
    """See the module doc: no collector pauses and a short lock hand-over while building.
    The settings are process-wide, so the first build in saves them and the last one out
    restores them."""
    with _quiet_lock:
        if _quiet["depth"] == 0:
            _quiet.update(gc=gc.isenabled(), interval=sys.getswitchinterval())
            gc.disable()
            sys.setswitchinterval(min(_quiet["interval"], BUILD_SWITCH_INTERVAL_S))
        _quiet["depth"] += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet["depth"] -= 1
            if _quiet["depth"] == 0:
                # Everything alive now moves to the permanent generation: the new snapshot
                # is never walked by the collector again (reference counting frees it when it
                # is replaced). A build makes no cyclic garbage to leak this way (measured:
                # gc.collect() after a 128k build finds none).
                gc.freeze()
                sys.setswitchinterval(_quiet["interval"])
                if _quiet["gc"]:
                    gc.enable()


def build_snapshot(store: Store, seq: int) -> Snapshot:
    """A snapshot built in this interpreter."""
    return Snapshot.of(build_parts(store, seq))


class SnapshotCache:
    """The latest snapshot. When the event log has moved, readers keep getting the previous
    snapshot while one background thread builds the next (at 128k GPUs a build takes seconds;
    a dashboard must not stall on every controller event). A reader never queries the store:
    the same background thread looks up the newest event, at most every SEQ_CHECK_S.
    `get(wait=True)` checks and builds in the caller: a mutation's own response, and the reads
    after it, then see its effect."""

    def __init__(self, store: Store, warm: Callable[[Snapshot], None] | None = None, *,
                 child_after_s: float = CHILD_AFTER_S) -> None:
        self.store = store
        self.child_after_s = child_after_s
        self._warm = warm  # run on each new snapshot before readers get it
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._checked = time.monotonic()
        self._kick = threading.Event()  # a reader asks the worker for a check
        self._worker: threading.Thread | None = None
        self._flag = threading.Lock()  # guards _worker; never held across a build
        self._state: FleetState | None = None  # read on incrementally, under _lock

    def newest_seq(self) -> int:
        return self.store.newest_seq()

    def peek(self) -> Snapshot | None:
        """The current snapshot without touching the store (None before the first build);
        schedules the background check like `get`."""
        snap = self._snap
        if (snap is not None and time.monotonic() - self._checked >= SEQ_CHECK_S
                and (not self._kick.is_set() or self._worker is None)):  # else: asked
            self._refresh_in_background()
        return snap

    def get(self, *, wait: bool = False) -> Snapshot:
        if not wait:
            snap = self.peek()
            if snap is not None:
                return snap
        with self._lock:
            self._checked = time.monotonic()
            seq = self.newest_seq()
            if self._snap is None or self._snap.seq < seq:
                self._snap = self._build(seq, self._snap)
            return self._snap

    def _build(self, seq: int, last: Snapshot | None) -> Snapshot:
        parts = None
        if last is not None and last.built_s >= self.child_after_s and not self._in_memory():
            try:
                parts = build_in_child(self.store.url, seq)
            except (BuildError, OSError, subprocess.TimeoutExpired) as err:
                log.warning("building the snapshot in a child process failed (%s); building "
                            "it in the server instead", redact(str(err)))
        with _quiet_build():
            snap = Snapshot.of(parts if parts is not None else build_parts(self.store, seq))
            self._fold_state(snap)
            if self._warm is not None:
                self._warm(snap)
        return snap

    def _fold_state(self, snap: Snapshot) -> None:
        """The fleet state at the snapshot's seq, read on from the last one (a few events,
        not the whole log, per new snapshot): its conditions and rack lifecycle states."""
        state = self._state
        if state is None or state.topo.spec.name != snap.fleet or state.seq > snap.seq:
            spec = loaded_spec(self.store)
            if spec is None or spec.name != snap.fleet:
                return
            state = self._state = FleetState(Topology.build(spec))
        state.refresh(self.store, until_seq=snap.seq)
        out: dict[str, list[dict[str, Any]]] = {}
        topo = state.topo
        snap.rack_states = {rack.id: state.state_of(rack.id) or UNENROLLED
                            for rack in topo.racks}
        trays: dict[str, dict[str, int]] = {}
        for rack in topo.racks:
            per = trays[rack.id] = {}
            for tray in set(topo.gpu_tray[rack.gpu_first:rack.gpu_end].tolist()):
                st = state.state_of(topo.ids[tray]) or UNENROLLED
                per[st] = per.get(st, 0) + 1
        snap.tray_states = trays
        snap.racks_per_leaf = topo.spec.network.racks_per_leaf
        for rack in topo.racks:
            out[rack.id] = [c.as_dict() for c in state.conditions(rack.id)]
        for cid in state.parts_with_conditions():
            if cid not in out and any(c.status is not Status.TRUE
                                      for c in state.conditions(cid)):
                out[cid] = [c.as_dict() for c in state.conditions(cid)]
        snap.conditions = out

    def _in_memory(self) -> bool:
        """An in-memory SQLite store cannot be opened by another process."""
        url = self.store.url
        return url.startswith("sqlite") and (url.rstrip("/") in ("sqlite:", "sqlite:/")
                                             or ":memory:" in url or "mode=memory" in url)

    def _refresh_in_background(self) -> None:
        """Wake the worker thread (start it if there is none): one long-lived thread, since
        starting a thread per check cost a request-path share of the CPU."""
        self._kick.set()
        with self._flag:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="rackscale-snapshot",
                                                daemon=True)
                self._worker.start()

    def _work(self) -> None:
        # Bounded: the thread ends after WORKER_IDLE_S without a request (the next one starts
        # it again), so an idle or discarded cache holds no thread.
        while True:
            if not self._kick.wait(WORKER_IDLE_S):
                with self._flag:
                    if not self._kick.is_set():  # else a kick raced the timeout: go on
                        self._worker = None
                        return
                continue
            self._kick.clear()
            try:
                self.get(wait=True)
            except Exception:  # the next request retries; a reader must not see the thread die
                log.exception("store snapshot rebuild failed")
