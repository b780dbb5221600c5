"""Crash-safe JSON files outside the checkpoint store: the simulated plant, findings, report.

Each is written through a unique temporary file in the same directory, fsynced, renamed over
the target, and its directory fsynced; concurrent writers never share a temp file, and a
reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from rackscale import durable
from rackscale.certify.findings import Finding, write_jsonl
from rackscale.fleet import build_topology, seed_fleet
from rackscale.lifecycle.drivers import SimPlant


def _fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


@pytest.fixture()
def syscalls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Records fsync (of which path) and replace (to which path), in order."""
    seen: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        seen.append(("fsync", _fd_path(fd)))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        seen.append(("replace", str(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    return seen


def _assert_durable(seen: list[tuple[str, str]], target: Path) -> None:
    """The file was synced, then renamed onto `target`, then its directory synced."""
    i = seen.index(("replace", str(target)))
    before, after = seen[:i], seen[i + 1:]
    assert any(op == "fsync" and Path(p).parent == target.parent and p != str(target.parent)
               for op, p in before), seen
    assert ("fsync", str(target.parent)) in after, seen


def _small_plant(path: Path) -> SimPlant:
    spec = seed_fleet()
    return SimPlant.for_topology(build_topology(spec), path=path)


def test_the_plant_file_is_written_durably(tmp_path: Path, syscalls: list) -> None:
    path = tmp_path / "plant.json"
    plant = _small_plant(path)
    syscalls.clear()
    rack = sorted(plant.nominal_flow)[0]
    plant.set_flow(rack, 1.0)
    _assert_durable(syscalls, path)
    assert json.loads(path.read_text())["flow_lpm"][rack] == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["plant.json"]  # no temp file left


def test_findings_are_written_durably_and_keep_earlier_runs(tmp_path: Path,
                                                           syscalls: list) -> None:
    path = tmp_path / "findings.jsonl"
    f = Finding(component="us-east/r01/c01/gpu0", kind="slow_gpu", stage=1,
                evidence={"tflops": 1.0}, confidence=0.9)
    assert write_jsonl([f], path, run_id="r1", backend="twin") == 1
    syscalls.clear()
    assert write_jsonl([f, f], path, run_id="r2", backend="twin") == 2
    _assert_durable(syscalls, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["run_id"] for r in rows] == ["r1", "r2", "r2"]


def test_concurrent_plant_saves_never_collide_or_show_half_a_file(tmp_path: Path) -> None:
    """Two processes (two demos in one directory) saving the plant at once: with one fixed
    temp name, one rename finds its temp file gone or renames the other's half-written one."""
    path = tmp_path / "plant.json"
    plants = [_small_plant(path) for _ in range(3)]
    errors: list[Exception] = []
    stop = threading.Event()

    def writer(plant: SimPlant, n: int) -> None:
        try:
            rack = sorted(plant.nominal_flow)[n]
            for i in range(60):
                plant.set_flow(rack, float(i))
        except Exception as err:  # any failure of a writer fails the test
            errors.append(err)

    def reader() -> None:
        while not stop.is_set():
            try:
                json.loads(path.read_bytes())
            except (ValueError, FileNotFoundError) as err:
                errors.append(err)

    threads = [threading.Thread(target=writer, args=(p, n)) for n, p in enumerate(plants)]
    rt = threading.Thread(target=reader)
    rt.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    rt.join()
    assert errors == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plant.json"]


def test_write_atomic_leaves_the_old_file_when_the_write_fails(tmp_path: Path,
                                                               monkeypatch) -> None:
    path = tmp_path / "x.json"
    durable.write_atomic(path, '{"v": 1}')
    assert oct(path.stat().st_mode & 0o777) == oct(0o666 & ~_umask())

    def broken(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space"):
        durable.write_atomic(path, '{"v": 2}')
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def _umask() -> int:
    cur = os.umask(0)
    os.umask(cur)
    return cur
