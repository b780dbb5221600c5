"""The upload journal: an append-only log of upload ids and acknowledged part ETags.

One JSON line per event, appended with a single `write()` (a SIGKILL cannot lose a line the
kernel accepted), fsynced in batches rather than per part: rewriting and syncing the whole
journal after every part made a save quadratic in its number of files. What a power loss
can drop is only the unsynced tail, and every record is an optimisation, never a promise:
a part whose ETag is not in the journal is simply sent again, an upload id that was not
recorded is left to retention's orphan-upload sweep, a lost `done` is re-checked against the
store. The first line names the save (`save_uuid`); a journal of another save of the same id
(a killed earlier attempt) is discarded, so its `done` marks never skip this save's bytes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

SYNC_EVERY = 256  # records between fsyncs
SYNC_INTERVAL_S = 1.0  # or this long since the last fsync, whichever comes first


def replay(path: Path) -> tuple[str | None, dict[str, dict[str, Any]]]:
    """(save_uuid, entries by "tier/item") from a journal file; a torn last line is dropped."""
    entries: dict[str, dict[str, Any]] = {}
    save_uuid = None
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, entries
    for line in raw.split(b"\n"):
        if not line:
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            break  # the tail a crash cut short; nothing after it was acknowledged
        if "save_uuid" in rec:
            save_uuid = rec["save_uuid"]
            continue
        key = rec.pop("k")
        if "upload_id" in rec:
            entries[key] = {"upload_id": rec["upload_id"], "part_size": rec["part_size"],
                            "parts": {}}
        elif "p" in rec:
            entries.setdefault(key, {"parts": {}})["parts"][str(rec["p"])] = rec["e"]
        else:
            entries.setdefault(key, {"parts": {}}).update(rec)
    return save_uuid, entries


class Journal:
    """The journal of one save (one rank of it): an in-memory view plus the append-only file."""

    def __init__(self, path: Path, save_uuid: str, *, sync: bool = True) -> None:
        self.path = path
        self.sync = sync
        self._lock = threading.Lock()
        owner, entries = replay(path)
        self.entries: dict[str, dict[str, Any]] = entries if owner == save_uuid else {}
        path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
        if owner != save_uuid:
            flags |= os.O_TRUNC
        self._fd: int | None = os.open(path, flags, 0o644)
        self._unsynced = 0
        self._synced_at = time.monotonic()
        if owner != save_uuid:
            self._append({"save_uuid": save_uuid}, force_sync=True)

    def get(self, key: str) -> dict[str, Any] | None:
        return self.entries.get(key)

    def _append(self, rec: dict[str, Any], *, force_sync: bool = False) -> None:
        with self._lock:
            if self._fd is None:
                raise ValueError(f"journal {self.path} is closed")
            os.write(self._fd, json.dumps(rec, separators=(",", ":")).encode() + b"\n")
            self._unsynced += 1
            due = (self._unsynced >= SYNC_EVERY
                   or time.monotonic() - self._synced_at >= SYNC_INTERVAL_S)
            if self.sync and (force_sync or due):
                os.fsync(self._fd)
                self._unsynced = 0
                self._synced_at = time.monotonic()

    def start(self, key: str, upload_id: str, part_size: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"upload_id": upload_id, "part_size": part_size, "parts": {}}
        self.entries[key] = entry
        self._append({"k": key, "upload_id": upload_id, "part_size": part_size})
        return entry

    def part(self, key: str, part_no: int, etag: str) -> None:
        self.entries[key]["parts"][str(part_no)] = etag
        self._append({"k": key, "p": part_no, "e": etag})

    def mark(self, key: str, **flags: bool) -> None:
        self.entries.setdefault(key, {"parts": {}}).update(flags)
        self._append({"k": key, **flags})

    def flush(self) -> None:
        with self._lock:
            if self._fd is not None and self.sync and self._unsynced:
                os.fsync(self._fd)
                self._unsynced = 0
                self._synced_at = time.monotonic()

    def close(self) -> None:
        self.flush()
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def drop(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
