"""The DCP writer hashes each file while DCP writes it (no read-back), with the hashes a
read-back would give; a stream used other than by appending is hashed from disk instead.
Tier pushes after the save returns run at a lower CPU priority than the caller."""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from hypothesis import given, settings
from hypothesis import strategies as st

import rackscale.checkpoint.dcp as rdcp
from rackscale.checkpoint import CheckpointManager, Restorer, Tiers, parse_config
from rackscale.checkpoint.dcp import TieredStorageReader, TieredStorageWriter
from rackscale.checkpoint.dcp_stream import HashingFileSystem
from rackscale.checkpoint.hashing import DEFAULT_ALGO, hash_files
from tests.needs import require


def cfg(tmp: Path, **over: object) -> dict:
    return {"local_dir": str(tmp / "local"),
            "region": {"name": "r", "kind": "dir", "path": str(tmp / "r")},
            "chunk_size": 4096, "part_size": 4096, **over}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(writes=st.lists(st.integers(0, 3 * 4096 + 7), max_size=8),
       chunk=st.sampled_from([4096, 5000, 8192]), fsync_at_end=st.booleans())
def test_hashes_taken_while_writing_equal_a_read_back(tmp_path_factory, writes: list[int],
                                                      chunk: int, fsync_at_end: bool) -> None:
    path = tmp_path_factory.mktemp("s") / "f"
    fs = HashingFileSystem(chunk, DEFAULT_ALGO)
    with ThreadPoolExecutor(2) as pool:
        fs.pool = pool
        with fs.create_stream(path, "wb") as s:
            for n, size in enumerate(writes):
                s.write(bytes([n % 251]) * size)
            if fsync_at_end:
                os.fsync(s.fileno())  # DCP's order: the fsync, then the close
        got = fs.take(path.name, path.stat().st_size)
    assert got == hash_files([path], chunk, DEFAULT_ALGO)[0][1]


@pytest.mark.parametrize("use", ["seek", "truncate", "write_after_fsync"])
def test_a_stream_not_plainly_appended_to_is_not_trusted(tmp_path: Path, use: str) -> None:
    path = tmp_path / "f"
    fs = HashingFileSystem(4096, DEFAULT_ALGO)
    with ThreadPoolExecutor(2) as pool:
        fs.pool = pool
        with fs.create_stream(path, "wb") as s:
            s.write(b"a" * 10_000)
            if use == "seek":
                s.seek(0)
                s.write(b"b")
            elif use == "truncate":
                s.truncate(5000)
            else:
                os.fsync(s.fileno())
                s.write(b"c" * 10)
        assert fs.take(path.name, path.stat().st_size) is None


def test_hashes_recorded_for_another_size_are_not_used(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fs = HashingFileSystem(4096, DEFAULT_ALGO)
    with ThreadPoolExecutor(1) as pool:
        fs.pool = pool
        with fs.create_stream(path, "wb") as s:
            s.write(b"x" * 9000)
        assert fs.take(path.name, 9001) is None
        assert fs.take(path.name, 9000) is None  # taken once: a second take finds nothing


def test_the_writer_does_not_read_its_data_files_back_and_they_verify(tmp_path: Path,
                                                                      monkeypatch) -> None:
    again: list[list[str]] = []
    orig = rdcp.hash_entries
    monkeypatch.setattr(rdcp, "hash_entries",
                        lambda d, names, *a, **k: (again.append(sorted(names)),
                                                   orig(d, names, *a, **k))[1])
    c = parse_config(cfg(tmp_path))
    sd = {f"t{i}": torch.arange(5000 * (i + 1), dtype=torch.float32) for i in range(3)}
    w = TieredStorageWriter(c, 1, single_file_per_rank=False)
    dcp.save(sd, storage_writer=w)
    assert w.report is not None and "region" in w.report.states
    assert again == [[".metadata"]]  # DCP's index is hashed after its rename; nothing else
    t = Tiers(c)
    assert Restorer(t).verify("step-00000001", t.region)["status"] == "ok"
    got = {k: torch.zeros_like(v) for k, v in sd.items()}
    fresh = cfg(tmp_path / "fresh") | {"region": cfg(tmp_path)["region"]}  # another node
    dcp.load(got, storage_reader=TieredStorageReader(parse_config(fresh), "latest"))
    assert all(torch.equal(got[k], sd[k]) for k in sd)


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.parametrize("nice", [0, 7])
def test_background_pushes_run_nicer_than_the_caller_and_hashing_does_not(
        tmp_path: Path, nice: int) -> None:
    base = _nice()
    with CheckpointManager(parse_config(cfg(tmp_path, background_nice=nice))) as mgr:
        worker = mgr._worker.submit(_nice).result()
        # a part thread first started from the (nicer) save worker is not lowered twice
        parts = mgr._worker.submit(lambda: mgr._parts.submit(_nice).result()).result()
        tier = mgr._tierpool.submit(_nice).result()
        hashing = mgr.pool.submit(_nice).result()
    want = min(19, base + nice)
    assert (worker, parts, tier, hashing) == (want, want, want, base)


_IOPRIO_GET = {"x86_64": 252, "aarch64": 31, "riscv64": 31}


def _io_class() -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    got = libc.syscall(_IOPRIO_GET[os.uname().machine], 1, threading.get_native_id())
    assert got >= 0, os.strerror(ctypes.get_errno())
    return got >> 13


@pytest.mark.parametrize("io", ["normal", "idle"])
def test_background_pushes_use_the_idle_io_class_and_hashing_does_not(
        tmp_path: Path, io: str) -> None:
    # The project runs on Linux (the lab, Slurm): a machine this test cannot read the
    # classes on is a missing part, not a pass.
    require(None if sys.platform == "linux" and os.uname().machine in _IOPRIO_GET else
            f"reading a thread's I/O class needs Linux on {', '.join(_IOPRIO_GET)}")
    base = _io_class()
    with CheckpointManager(parse_config(cfg(tmp_path, background_io=io))) as mgr:
        got = [mgr._worker.submit(_io_class).result(), mgr._parts.submit(_io_class).result(),
               mgr._tierpool.submit(_io_class).result()]
        hashing = mgr.pool.submit(_io_class).result()
    assert got == [3 if io == "idle" else base] * 3 and hashing == base
