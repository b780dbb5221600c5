"""Readers get the previous snapshot while the next one builds; `wait=True` builds in place."""

from __future__ import annotations

import time
from pathlib import Path

from rackscale.server.snapshot import SnapshotCache
from rackscale.store import Store

from .conftest import copy_db


def test_stale_while_rebuilding_then_fresh(demo_db: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'r.db')}")
    cache = SnapshotCache(store)
    first = cache.get()
    assert cache.get() is first  # nothing moved: no rebuild
    seq = store.append_event("us-east/r01", "lifecycle.noted", {"finding_seq": 1}, reason="test")
    assert cache.get().seq == first.seq  # answered at once from the previous snapshot
    deadline = time.monotonic() + 60
    while cache.get().seq != seq and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.get().seq == seq
    seq2 = store.append_event("us-east/r01", "lifecycle.noted", {"finding_seq": 1}, reason="test")
    assert cache.get(wait=True).seq == seq2
    store.close()
