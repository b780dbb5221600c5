"""Hash DCP's files while DCP writes them, instead of reading them back afterwards.

DCP's file writer opens one stream per file and writes it front to back, then fsyncs it.
`HashingFileSystem` hands it a stream that, each time a whole chunk has been written, flushes
it to the page cache and hashes that chunk on the save's worker threads (one chunk in memory
per worker), so the hashing runs beside the rest of the writing and beside the fsync, which
waits on the disk. The hashes are those `hash_files` computes from the finished file. A
stream that is used in any other way (a seek, a truncate, anything but appending) is not
trusted: its file is hashed again from disk after the write, as before.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Generator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystem

from rackscale.checkpoint.hashing import digest, hash_range

# What the stream may be asked without losing track of the bytes in the file.
_HARMLESS = frozenset({"tell", "fileno", "flush", "closed", "name", "mode", "writable",
                       "readable", "seekable", "isatty", "raw"})


class _HashingStream(io.RawIOBase):
    def __init__(self, f: Any, path: str, chunk: int, algo: str, pool: Executor) -> None:
        self._f, self._path, self._chunk, self._algo, self._pool = f, path, chunk, algo, pool
        self.written = 0
        self.submitted = 0  # bytes whose chunks are queued for hashing
        self.futures: list[Future[str]] = []
        self.trusted = True
        self._tail = False  # a short last chunk is queued: the file must not grow after it

    def write(self, b: Any) -> int | None:
        if self._tail:
            self.trusted = False
        n: int | None = self._f.write(b)
        self.written += n if n is not None else len(memoryview(b))
        if self.written - self.submitted >= self._chunk:
            self._f.flush()  # the chunk must be in the page cache before a worker reads it
            while self.written - self.submitted >= self._chunk:
                self._submit(self._chunk)
        return n

    def _submit(self, n: int) -> None:
        self.futures.append(self._pool.submit(hash_range, self._path, self.submitted, n,
                                              self._algo))
        self.submitted += n

    def _submit_tail(self) -> None:
        self._f.flush()
        if self.written > self.submitted:
            self._submit(self.written - self.submitted)
            self._tail = True

    def finish(self) -> tuple[int, list[Future[str]]] | None:
        """(size, futures of the chunk hashes) of the file as written, or None if it cannot
        be trusted (then its file is hashed from disk)."""
        self._submit_tail()
        return (self.written, self.futures) if self.trusted else None

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        pos: int = self._f.tell()
        return pos

    def fileno(self) -> int:
        # Asked for the fsync after the last write: the short last chunk is hashed meanwhile.
        self._submit_tail()
        fd: int = self._f.fileno()
        return fd

    def flush(self) -> None:
        self._f.flush()

    def seek(self, *args: Any) -> int:
        self.trusted = False
        pos: int = self._f.seek(*args)
        return pos

    def truncate(self, *args: Any) -> int:
        self.trusted = False
        size: int = self._f.truncate(*args)
        return size

    def __getattr__(self, name: str) -> Any:
        # io's own bookkeeping (`_IOBase__closed` before the first close) is not a file use.
        if name not in _HARMLESS and not name.startswith("_"):
            self.trusted = False
        return getattr(self._f, name)


class HashingFileSystem(FileSystem):
    """DCP's local file system, hashing the files of `write_data` while they are written."""

    def __init__(self, chunk_size: int, algo: str) -> None:
        super().__init__()
        self.chunk_size, self.algo = chunk_size, algo
        self.pool: Executor | None = None  # set for the duration of one rank's write_data
        self.hashed: dict[str, tuple[int, list[Future[str]]]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable (async_save in a process): the pool stays behind, hashing is per process.
        return {**self.__dict__, "pool": None, "_lock": None, "hashed": {}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None,
                                                                             None]:
        pool = self.pool
        if pool is None or mode != "wb":
            with super().create_stream(path, mode) as s:
                yield s
            return
        p = Path(path)
        with p.open("wb") as f:
            stream = _HashingStream(f, str(p), self.chunk_size, self.algo, pool)
            yield stream
            got = stream.finish()
        with self._lock:
            if got is not None:
                self.hashed[p.name] = got
            else:
                self.hashed.pop(p.name, None)

    def take(self, name: str, size: int) -> list[str] | None:
        """The chunk hashes recorded for `name` if they cover exactly its `size` bytes."""
        with self._lock:
            got = self.hashed.pop(name, None)
        if got is None or got[0] != size:
            return None
        return [f.result() for f in got[1]] or [digest(b"", self.algo)]
