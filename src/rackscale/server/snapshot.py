"""What the API, the dashboard and /metrics read: one consistent snapshot of the store.

The snapshot is the report's own read (report.collect + report.build_ledger, read-only), so the
dashboard and the report can never disagree on a number. It is rebuilt only when the event log
has moved (every state change appends an event), so a busy dashboard costs one tiny query per
request, not a ledger build.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rackscale.report import Ledger, StoreView, build_ledger, collect
from rackscale.store import Store

log = logging.getLogger("rackscale.server")
UNENROLLED = "unenrolled"  # a GPU whose tray has no lifecycle state yet


@dataclass(slots=True, kw_only=True)
class Snapshot:
    seq: int  # the newest event this snapshot has seen
    built_s: float
    view: StoreView
    ledger: Ledger
    racks: list[dict[str, Any]]
    rack_index: dict[str, int]
    # (lifecycle state, region, sku) -> GPUs; a GPU's state is its tray's
    gpu_counts: dict[tuple[str, str, str], int] = field(default_factory=dict)
    # Derived views (rack briefs, the summary) computed once per snapshot, not per request:
    # a 1,778-rack fleet is then a list slice per page.
    memo: dict[str, Any] = field(default_factory=dict)

    def derived(self, key: str, build: Callable[[Snapshot], Any]) -> Any:
        if key not in self.memo:
            self.memo[key] = build(self)  # a race only builds the same value twice
        return self.memo[key]

    @property
    def fleet(self) -> str:
        return self.view.topo.spec.name

    def rack(self, rack_id: str) -> dict[str, Any] | None:
        i = self.rack_index.get(rack_id)
        return None if i is None else self.racks[i]

    def gpu_total(self) -> int:
        return sum(self.gpu_counts.values())


def _gpu_counts(view: StoreView) -> dict[tuple[str, str, str], int]:
    topo = view.topo
    tray_state: dict[int, str] = {}
    counts: Counter[tuple[str, str, str]] = Counter()
    for g in range(len(topo.gpu_ids)):
        tray = int(topo.gpu_tray[g])
        if tray not in tray_state:
            tray_state[tray] = view.state_of(topo.ids[tray]) or UNENROLLED
        rack = topo.racks[int(topo.gpu_rack[g])]
        counts[(tray_state[tray], rack.region, str(topo.gpu_sku[g]))] += 1
    return dict(counts)


def build_snapshot(store: Store, seq: int) -> Snapshot:
    t0 = time.perf_counter()
    view = collect(store)
    ledger = build_ledger(view)
    racks = ledger.racks
    return Snapshot(seq=seq, built_s=time.perf_counter() - t0, view=view, ledger=ledger,
                    racks=racks, rack_index={r["id"]: i for i, r in enumerate(racks)},
                    gpu_counts=_gpu_counts(view))


class SnapshotCache:
    """The latest snapshot. When the event log has moved, readers keep getting the previous
    snapshot while one background thread builds the next (at 128k GPUs a build takes seconds;
    a dashboard must not stall on every controller event). `get(wait=True)` builds in the
    caller: a mutation's own response, and the reads after it, then see its effect."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._building = False
        self._flag = threading.Lock()  # guards _building; never held across a build

    def newest_seq(self) -> int:
        newest = self.store.events(newest_first=True, limit=1)
        return newest[0].seq if newest else 0

    def get(self, *, wait: bool = False) -> Snapshot:
        seq = self.newest_seq()
        snap = self._snap
        if snap is not None and snap.seq == seq:
            return snap
        if snap is not None and not wait:
            self._refresh_in_background()
            return snap
        with self._lock:
            if self._snap is None or self._snap.seq < seq:
                self._snap = build_snapshot(self.store, self.newest_seq())
            return self._snap

    def _refresh_in_background(self) -> None:
        with self._flag:
            if self._building:
                return
            self._building = True

        def build() -> None:
            try:
                self.get(wait=True)
            except Exception:  # the next request retries; a reader must not see the thread die
                log.exception("store snapshot rebuild failed")
            finally:
                self._building = False

        threading.Thread(target=build, name="rackscale-snapshot", daemon=True).start()
