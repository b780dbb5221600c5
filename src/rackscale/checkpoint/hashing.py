"""Content hashes: blake3 when installed (fast, multi-threaded), sha256 otherwise.

The algorithm name travels in the manifest, so a reader verifies with what the writer used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, Future
from typing import Any

try:
    import blake3 as _blake3
except ImportError:  # pragma: no cover - blake3 is in the s3/test env; sha256 keeps us working
    _blake3 = None  # type: ignore[assignment]  # absent module; each use checks for None

DEFAULT_ALGO = "blake3" if _blake3 is not None else "sha256"


def _new(algo: str) -> Any:
    if algo == "blake3":
        if _blake3 is None:
            raise RuntimeError("manifest uses blake3 but the blake3 package is not installed; "
                               "pip install blake3")
        return _blake3.blake3()
    if algo == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown hash algorithm {algo!r}; valid: blake3, sha256")


HASHERS: dict[str, Callable[[], Any]] = {"blake3": lambda: _new("blake3"),
                                         "sha256": lambda: _new("sha256")}


def digest(data: bytes | memoryview, algo: str = DEFAULT_ALGO) -> str:
    h = _new(algo)
    h.update(data)
    hexdigest: str = h.hexdigest()  # blake3 or hashlib: both give the hex string
    return hexdigest


def chunk_hashes(data: bytes | memoryview, chunk_size: int, algo: str = DEFAULT_ALGO) -> list[str]:
    view = memoryview(data)
    if len(view) == 0:
        return [digest(b"", algo)]
    return [digest(view[o:o + chunk_size], algo) for o in range(0, len(view), chunk_size)]


def combine(parts: Iterable[str], algo: str = DEFAULT_ALGO) -> str:
    """Hash of hashes: the item hash over its chunk hashes, the checkpoint hash over items."""
    h = _new(algo)
    for p in parts:
        h.update(p.encode())
        h.update(b"\n")
    hexdigest: str = h.hexdigest()  # blake3 or hashlib: both give the hex string
    return hexdigest


def hash_range(path: str, start: int, length: int, algo: str) -> str:
    # One chunk per call: a worker holds at most one chunk in memory (the coordinator used
    # to read whole files, which doubled the peak RSS of a save).
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = os.pread(fd, length, start)
    finally:
        os.close(fd)
    if len(buf) != length:
        raise OSError(f"{path}: short read at {start} ({len(buf)} of {length} bytes); the "
                      f"file changed while it was hashed")
    return digest(buf, algo)


def hash_files(paths: Sequence[str | os.PathLike[str]], chunk_size: int, algo: str,
               pool: Executor | None = None) -> list[tuple[int, list[str]]]:
    """(size, chunk hashes) of each file, streamed chunk by chunk (memory: one chunk per
    worker), the chunks of every file hashed in parallel on `pool` when one is given."""
    jobs: list[tuple[int, list[Future[str] | str]]] = []
    for p in paths:
        path = os.fspath(p)
        size = os.stat(path).st_size
        if size == 0:
            jobs.append((0, [digest(b"", algo)]))
            continue
        futs: list[Future[str] | str] = []
        for off in range(0, size, chunk_size):
            n = min(chunk_size, size - off)
            futs.append(pool.submit(hash_range, path, off, n, algo) if pool is not None
                        else hash_range(path, off, n, algo))
        jobs.append((size, futs))
    return [(size, [f if isinstance(f, str) else f.result() for f in futs])
            for size, futs in jobs]


def copy_and_hash(src: str | os.PathLike[str], dst: str | os.PathLike[str], chunk_size: int,
                  algo: str, *, sync: bool = True) -> tuple[int, list[str]]:
    """Copy `src` to `dst` chunk by chunk, hashing what was written (for imports)."""
    hashes, size = [], 0
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while block := fin.read(chunk_size):
            fout.write(block)
            hashes.append(digest(block, algo))
            size += len(block)
        if sync:
            fout.flush()
            os.fsync(fout.fileno())
    return size, hashes or [digest(b"", algo)]
