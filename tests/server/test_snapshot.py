"""Readers get the previous snapshot while the next one builds; `wait=True` builds in place;
readers never query the store; big builds run in a child process; hot responses are
serialized once per snapshot."""

from __future__ import annotations

import gc
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from rackscale.server import api
from rackscale.server import snapshot as snapshot_mod
from rackscale.server.build import build_in_child, build_parts
from rackscale.server.snapshot import (
    MAX_ENCODED,
    SEQ_CHECK_S,
    Snapshot,
    SnapshotCache,
    build_snapshot,
)
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


def _store(demo_db: Path, tmp_path: Path, name: str = "s.db") -> Store:
    return Store(f"sqlite:///{copy_db(demo_db, tmp_path / name)}")


def test_readers_do_not_query_the_store(demo_db: Path, tmp_path: Path) -> None:
    """A reader's get() is a memory read: at most one background look-up of the newest event
    per SEQ_CHECK_S, however many requests come in."""
    store = _store(demo_db, tmp_path)
    cache = SnapshotCache(store)
    cache.get()
    time.sleep(SEQ_CHECK_S * 2)  # let any check the first get() scheduled finish
    queries: list[str] = []

    def count(_conn: Any, _cur: Any, stmt: str, *_a: Any) -> None:
        queries.append(stmt)

    event.listen(store.engine, "before_cursor_execute", count)
    t0 = time.monotonic()
    for _ in range(200):
        cache.get()
    elapsed = time.monotonic() - t0
    time.sleep(0.3)  # a background check started by those gets would have run by now
    event.remove(store.engine, "before_cursor_execute", count)
    checks = int(elapsed / SEQ_CHECK_S) + 2
    assert len(queries) <= checks, queries
    store.close()


def test_build_leaves_the_collector_as_it_found_it_and_freezes(demo_db: Path,
                                                               tmp_path: Path) -> None:
    store = _store(demo_db, tmp_path)
    interval = sys.getswitchinterval()
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    try:
        cache = SnapshotCache(store)
        snap = cache.get()
        assert gc.isenabled() and sys.getswitchinterval() == interval
        # the snapshot was moved out of the collector's reach
        assert gc.get_freeze_count() > frozen
        assert not gc.is_tracked(snap) or gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # give this test process's objects back to the collector
        store.close()


def test_a_child_process_build_serves_the_same_snapshot(demo_db: Path, tmp_path: Path) -> None:
    """Big builds run in a child process: what it sends back is what an in-process build has."""
    store = _store(demo_db, tmp_path)
    seq = SnapshotCache(store).newest_seq()
    here = Snapshot.of(build_parts(store, seq))
    child = Snapshot.of(build_in_child(store.url, seq))
    assert child.built_pid != os.getpid() and here.built_pid == os.getpid()
    assert child.fleet == here.fleet and child.seq == here.seq == seq
    assert child.racks == here.racks and child.rack_index == here.rack_index
    assert child.ledger.findings == here.ledger.findings
    assert [s.as_dict() for s in child.ledger.steps] == [s.as_dict() for s in here.ledger.steps]
    assert child.ledger.warnings == here.ledger.warnings
    assert child.gpu_counts == here.gpu_counts
    assert api._summary(child) == api._summary(here)
    store.close()


def test_cache_rebuilds_in_a_child_once_builds_are_slow(demo_db: Path, tmp_path: Path) -> None:
    store = _store(demo_db, tmp_path)
    cache = SnapshotCache(store, child_after_s=0.0)  # every build after the first is "slow"
    first = cache.get()
    assert first.built_pid == os.getpid()  # the first build has nothing to serve meanwhile
    seq = store.append_event("us-east/r01", "lifecycle.noted", {"finding_seq": 1}, reason="t")
    snap = cache.get(wait=True)
    assert snap.seq == seq and snap.built_pid not in (0, os.getpid())
    store.close()


def test_a_failing_child_build_falls_back_to_this_process(demo_db: Path, tmp_path: Path,
                                                          caplog: Any) -> None:
    db = copy_db(demo_db, tmp_path / "f.db")
    store = Store(f"sqlite:///{db}")
    cache = SnapshotCache(store, child_after_s=0.0)
    cache.get()
    seq = store.append_event("us-east/r01", "lifecycle.noted", {"finding_seq": 1}, reason="t")
    # The child opens the store read-only by URL; a URL it cannot open makes it fail for real.
    store.url = f"sqlite:///{tmp_path / 'missing.db'}"
    with caplog.at_level(logging.WARNING, logger="rackscale.server"):
        snap = cache.get(wait=True)
    assert snap.seq == seq and snap.built_pid == os.getpid()
    assert "child process failed" in caplog.text
    store.close()


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(0, 12), limit=st.integers(1, 10),
       region=st.sampled_from([None, "us-east", "us-west", "eu-x"]),
       state=st.sampled_from([None, "degraded", "production", "draining"]))
def test_encoded_rack_pages_equal_the_page_they_encode(demo_snapshot: Snapshot, offset: int,
                                                       limit: int, region: str | None,
                                                       state: str | None) -> None:
    body = api._racks_body(demo_snapshot, offset, limit, region, state)
    rows = [r for r in api._briefs(demo_snapshot)
            if (region is None or r["region"] == region) and (state is None or r["state"] == state)]
    assert json.loads(body) == api.page(rows, offset, limit)
    assert len(demo_snapshot.bodies) <= MAX_ENCODED


@pytest.fixture(scope="module")
def demo_snapshot(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    store = _store(demo_db, tmp_path_factory.mktemp("snap"))
    snap = build_snapshot(store, SnapshotCache(store).newest_seq())
    store.close()
    return snap


def test_encoded_bodies_are_bounded_per_snapshot(demo_snapshot: Snapshot) -> None:
    for off in range(MAX_ENCODED + 50):
        api._racks_body(demo_snapshot, off, 1, None, None)
    assert len(demo_snapshot.bodies) == MAX_ENCODED
    # past the bound a page is still right, only not kept
    assert json.loads(api._racks_body(demo_snapshot, 3, 2, None, None))["offset"] == 3


def test_the_background_worker_ends_when_idle_and_comes_back(demo_db: Path, tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    monkeypatch.setattr(snapshot_mod, "WORKER_IDLE_S", 0.2)
    store = _store(demo_db, tmp_path)
    cache = SnapshotCache(store)
    first = cache.get()
    time.sleep(SEQ_CHECK_S * 1.5)
    cache.get()  # due for a check: the worker starts
    assert cache._worker is not None
    deadline = time.monotonic() + 10
    while cache._worker is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache._worker is None  # idle: the thread is gone
    seq = store.append_event("us-east/r01", "lifecycle.noted", {"finding_seq": 1}, reason="t")
    deadline = time.monotonic() + 60
    while cache.get().seq != seq and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.get().seq == seq != first.seq  # a new reader brought a worker back
    store.close()
