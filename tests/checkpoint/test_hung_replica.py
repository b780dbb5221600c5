"""A replica region that hangs never stalls training: an S3 endpoint that accepts connections
and never answers (a real listening socket) as the only replica; each DCP save through the
tiers returns at the region's commit, within 1.5x of the same save with no replica, while the
replica's push goes on beside it and ends, bounded by its store's timeouts, as a recorded
error. The checkpoints the replica lacks show as replication lag (the Prometheus gauge)."""

from __future__ import annotations

import socket
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp

from rackscale.checkpoint import TieredStorageWriter, parse_config
from rackscale.server.ops import checkpoint_metrics, replication_lag

ROUNDS = 3


class HungEndpoint:
    """Accepts every connection and never sends a byte; closes them all when stopped."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed by stop()
                return
            self.accepted += 1
            self.held.append(conn)

    def stop(self) -> None:
        self.sock.close()
        for c in self.held:
            c.close()


@pytest.fixture()
def hung() -> Iterator[HungEndpoint]:
    ep = HungEndpoint()
    try:
        yield ep
    finally:
        ep.stop()


def _cfg(tmp: Path, name: str, replica_port: int | None) -> Any:
    replicas = [] if replica_port is None else [{
        "name": "west", "kind": "s3", "endpoint": f"http://127.0.0.1:{replica_port}",
        "bucket": "ckpt", "access_key": "k", "secret_key": "s", "timeout_s": 2.0}]
    return parse_config({"local_dir": str(tmp / name / "local"),
                         "region": {"name": "east", "kind": "dir",
                                    "path": str(tmp / name / "east")},
                         "replicas": replicas})


def _state(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(step)
    return {f"w{i}": torch.randn(1024, 1024, generator=g) for i in range(8)}  # 32 MiB


def _save(cfg: Any, step: int) -> tuple[float, TieredStorageWriter]:
    sd = _state(step)
    w = TieredStorageWriter(cfg, step)
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=w, no_dist=True)
    return time.perf_counter() - t0, w


def test_a_hung_replica_does_not_stall_a_save(tmp_path: Path, hung: HungEndpoint) -> None:
    base_cfg, hung_cfg = _cfg(tmp_path, "base", None), _cfg(tmp_path, "hung", hung.port)
    base, with_hung, writers = [], [], []
    for step in range(1, ROUNDS + 1):  # interleaved: the host's load drifts alike for both
        base.append(_save(base_cfg, step)[0])
        s, w = _save(hung_cfg, step)
        with_hung.append(s)
        writers.append(w)
    ratio = statistics.median(with_hung) / statistics.median(base)
    print(f"save stall: {statistics.median(base):.3f} s without a replica, "
          f"{statistics.median(with_hung):.3f} s with a hung one ({ratio:.2f}x)")
    assert ratio <= 1.5, (base, with_hung)
    for w in writers:
        assert w.report is not None and "region" in w.report.states
        assert "replicated" not in w.report.states
    assert hung.accepted > 0  # the replica was asked, and did not answer
    assert not all(w.handle is not None and w.handle.done() for w in writers)
    # what a listing of the tiers shows: the oldest unreplicated checkpoint's wait
    rows = [{"id": w.ckpt_id, "states": dict(w.report.states)} for w in reversed(writers)
            if w.report is not None]
    now = time.time()
    lag = replication_lag(rows, now)
    assert lag == pytest.approx(now - writers[0].report.states["staged"], abs=0.01)
    gauges = {m.name: m.samples[0].value for m in checkpoint_metrics(
        {"checkpoints": rows, "replicas": ["west"], "listed_unix": now})
        if not m.samples[0].labels}
    assert gauges["rackscale_checkpoint_replication_lag_seconds"] == pytest.approx(lag)
    hung.stop()  # the endpoint goes: each push ends now, as its timeouts would end it
    for w in writers:
        assert w.handle is not None
        report = w.handle.wait(120)
        assert "west" in report.errors and "replicated" not in report.states
