"""A tier that accepts connections and never answers: every command is bounded by the
tier's `timeout_s`, the hung tier is asked once per command, and a cached restore does not
wait on it for its data."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rackscale.checkpoint import (
    CheckpointManager,
    Restorer,
    RestoreReport,
    Tiers,
    listing_rows,
    parse_config,
)

TIMEOUT_S = 1.0


@pytest.fixture()
def hung() -> Iterator[int]:
    """A server on the loopback that accepts every connection and never sends a byte."""
    srv = socket.create_server(("127.0.0.1", 0), backlog=256)
    srv.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except TimeoutError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        t.join(5)
        for c in held:
            c.close()
        srv.close()


def _cfg(tmp: Path, port: int | None) -> dict:
    cfg = {"local_dir": str(tmp / "local"), "fsync": False, "chunk_size": 4096,
           "part_size": 8192,
           "region": {"name": "east", "kind": "dir", "path": str(tmp / "east")},
           "replicas": [{"name": "west", "kind": "dir", "path": str(tmp / "west")}]}
    if port is not None:  # the region is the hung one; the replica still answers
        cfg["replicas"] = [cfg["region"] | {"name": "west", "path": str(tmp / "west")}]
        cfg["region"] = {"name": "east", "kind": "s3", "endpoint": f"http://127.0.0.1:{port}",
                         "bucket": "b", "access_key": "k", "secret_key": "s",
                         "timeout_s": TIMEOUT_S}
    return cfg


def _timed(fn: Callable[[], Any], limit_s: float) -> tuple[Any, float]:
    """fn() in a thread: (result, seconds); fails at `limit_s` instead of waiting it out."""
    out: dict = {}

    def run() -> None:
        t0 = time.perf_counter()
        out["value"] = fn()
        out["s"] = time.perf_counter() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit_s + 5)
    assert "s" in out, f"still waiting after {limit_s + 5} s"
    return out["value"], out["s"]


def test_ls_of_100_checkpoints_with_a_hung_region_is_bounded(tmp_path: Path, hung: int) -> None:
    east = parse_config(_cfg(tmp_path, None))
    with CheckpointManager(east) as mgr:
        for step in range(1, 101):
            mgr.save(step, {"x": bytes([step % 256]) * 100}).wait(30)
    tiers = Tiers(parse_config(_cfg(tmp_path, hung)))
    r = Restorer(tiers)
    rows, seconds = _timed(lambda: listing_rows(tiers, r, []), 2 * TIMEOUT_S + 1)
    assert seconds <= 2 * TIMEOUT_S + 1, seconds
    assert len(rows) == 100 and list(r.unreachable) == ["east"]
    assert {row["tiers"]["east"] for row in rows} == {"unreachable"}
    assert {row["tiers"]["west"] for row in rows} == {"yes"}


def test_a_cached_restore_with_a_hung_region_is_bounded(tmp_path: Path, hung: int) -> None:
    with CheckpointManager(parse_config(_cfg(tmp_path, None))) as mgr:
        mgr.save(1, {"x": b"abc" * 5000}).wait(30)
    tiers = Tiers(parse_config(_cfg(tmp_path, hung)))
    probe = Restorer(tiers)
    ckpt_id = probe.resolve_id("latest")  # as `checkpoint restore` does, then restores

    def restore() -> RestoreReport:
        probe.manifest(ckpt_id)
        return Restorer(tiers, like=probe).restore(ckpt_id)

    report, seconds = _timed(restore, 2 * TIMEOUT_S + 1)
    assert seconds <= 2 * TIMEOUT_S + 1, seconds
    assert report.served_by == {"local": 4} and list(report.unreachable) == ["east"]
