"""Crash-safety and thread-safety of the saver on directory tiers (no servers needed)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from rackscale.checkpoint import default_config
from rackscale.checkpoint.saver import CheckpointManager


def test_data_directory_is_synced_before_the_local_manifest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The renamed data files count only once their directory entry is durable: the data
    directory (and the new checkpoint directories above it) must be fsynced before the local
    manifest is committed."""
    log: list[tuple[str, str]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            log.append(("fsync-dir", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with CheckpointManager(default_config(tmp_path)) as mgr:
        local = mgr.tiers.local
        real_put = local.put

        def put(key: str, data: bytes | memoryview, *, if_absent: bool = False) -> str:
            log.append(("put", key))
            return real_put(key, data, if_absent=if_absent)

        monkeypatch.setattr(local, "put", put)
        mgr.save(1, {"w": np.arange(1000, dtype=np.float32)}).wait(60)
        data_dir = str(mgr.local_data_dir("step-00000001"))
    manifest = ("put", "ckpt/step-00000001/manifest.json")
    assert manifest in log
    before = log[:log.index(manifest)]
    synced = {p for kind, p in before if kind == "fsync-dir"}
    assert data_dir in synced
    assert str(Path(data_dir).parent.parent) in synced  # the new <prefix>/<id> entry


def test_close_stops_the_threads_even_when_the_last_save_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A background failure is raised by close(), not swallowed, and the pools still stop."""
    mgr = CheckpointManager(default_config(tmp_path))

    def broken(*_a: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(mgr, "_persist", broken)
    mgr.save(1, {"w": b"x" * 100})
    with pytest.raises(OSError, match="disk full"):
        mgr.close()
    for pool in (mgr._worker, mgr._parts, mgr._tierpool):
        with pytest.raises(RuntimeError, match="shutdown"):
            pool.submit(print)
