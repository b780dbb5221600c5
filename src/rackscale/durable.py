"""Crash-safe file writes for every room: a reader sees the old file or the new one, never
half of either, even after kill -9 or a power loss, and two writers never share a temp file.

Write to a temporary file with a unique name in the same directory (a rename is atomic only
within one filesystem), fsync it, rename it over the target, fsync the directory (the rename
itself is durable only once the directory entry is on disk). Imports nothing of rackscale, so
every room may use it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, sync: bool = True) -> None:
    """Replace `path` with `data` (str is written as UTF-8) atomically and durably."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    body = data.encode("utf-8") if isinstance(data, str) else data
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex[:12]}.tmp")
    # O_EXCL: the name is ours alone; 0o666 minus the umask, as open() would create it.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    done = False
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, dest)
        done = True
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    if sync:
        fsync_dir(dest.parent)
