"""Parallel multipart upload that resumes from its journal, and the manifest commit.

The journal (`journal.py`, append-only) records, per (tier, item), the upload id and the ETag
of every acknowledged part; objects up to one part are sent with one put. A restarted saver
asks the store which parts it holds (`list_parts`), keeps those whose ETag matches the
journal and sends only the rest, so a kill costs at most the parts that were in flight,
never the whole upload.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rackscale.checkpoint.errors import (
    AlreadyExists,
    CheckpointError,
    ManifestInvalid,
    ObjectMissing,
)
from rackscale.checkpoint.journal import Journal
from rackscale.checkpoint.manifest import Manifest, latest_json, parse_latest
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.tiers import Tiers

EventHook = Callable[[str, dict[str, Any]], None]


def no_events(_kind: str, _data: dict[str, Any]) -> None:
    return None


@dataclass(slots=True)
class UploadStats:
    parts_sent: int = 0
    parts_skipped: int = 0  # already on the store from an interrupted run
    bytes_sent: int = 0
    resumed_uploads: int = 0


class Uploader:
    def __init__(self, tiers: Tiers, pool: ThreadPoolExecutor, *, events: EventHook = no_events,
                 progress: Callable[[int], None] | None = None) -> None:
        self.tiers = tiers
        self.pool = pool
        self.events = events
        self.progress = progress
        self._jlock = threading.Lock()

    def part_size_for(self, store: ObjectStore) -> int:
        cfg = self.tiers.cfg
        size = cfg.part_size
        while size < store.min_part_size:
            size += cfg.part_size
        return size

    def upload_item(self, store: ObjectStore, ckpt_id: str, item: str, src: Path,
                    stats: UploadStats, journal: Journal) -> None:
        key = self.tiers.layout.data(ckpt_id, item)
        size = src.stat().st_size
        jkey = f"{store.name}/{item}"
        entry = journal.get(jkey)
        if entry and entry.get("done"):
            return
        put_file = getattr(store, "put_file", None)  # a directory tier: one kernel copy
        if put_file is not None and not (entry and "upload_id" in entry):
            put_file(key, src)
            with self._jlock:
                stats.parts_sent += 1
                stats.bytes_sent += size
            journal.mark(jkey, done=True)
            if self.progress:
                self.progress(size)
            return
        if size <= self.part_size_for(store) and not (entry and "upload_id" in entry):
            # One request instead of three, and nothing to resume: a put is atomic.
            data = src.read_bytes()
            store.put(key, data)
            with self._jlock:
                stats.parts_sent += 1
                stats.bytes_sent += len(data)
            journal.mark(jkey, done=True)
            if self.progress:
                self.progress(len(data))
            return
        have: dict[int, str] = {}
        if entry and "upload_id" in entry:
            try:
                server = store.list_parts(key, entry["upload_id"])
                have = {int(n): e for n, e in entry["parts"].items() if server.get(int(n)) == e}
                with self._jlock:  # the replicas upload in parallel into one UploadStats
                    stats.resumed_uploads += 1
                self.events("upload.resume", {"tier": store.name, "id": ckpt_id, "item": item,
                                              "parts_kept": len(have)})
            except ObjectMissing:
                # The upload is gone: either we completed it just before the kill, or the
                # store dropped it. A complete object of the right size means the former.
                info = store.head(key)
                if info is not None and info.size == size and entry.get("completing"):
                    journal.mark(jkey, done=True)
                    return
                entry = None
        if not entry or "upload_id" not in entry:
            entry = journal.start(jkey, store.create_upload(key), self.part_size_for(store))
        part_size = entry["part_size"]
        nparts = max(1, -(-size // part_size))
        todo = [n for n in range(1, nparts + 1) if n not in have]
        with self._jlock:
            stats.parts_skipped += nparts - len(todo)

        def send(n: int) -> tuple[int, str]:
            self.events("upload.part.begin", {"tier": store.name, "id": ckpt_id, "item": item,
                                              "part": n})
            with open(src, "rb") as f:
                f.seek((n - 1) * part_size)
                data = f.read(part_size)
            etag = store.upload_part(key, entry["upload_id"], n, data)
            journal.part(jkey, n, etag)
            with self._jlock:
                stats.parts_sent += 1
                stats.bytes_sent += len(data)
            self.events("upload.part", {"tier": store.name, "item": item, "part": n})
            if self.progress:
                self.progress(len(data))
            return n, etag

        for n, etag in (f.result() for f in [self.pool.submit(send, n) for n in todo]):
            have[n] = etag
        journal.mark(jkey, completing=True)
        store.complete_upload(key, entry["upload_id"], have)
        journal.mark(jkey, done=True)
        self.events("upload.complete", {"tier": store.name, "item": item})

    def upload_items(self, store: ObjectStore, ckpt_id: str, items: list[str],
                     stats: UploadStats, journal: Journal) -> None:
        """Every item: small ones (one put each) in parallel, large ones part-parallel."""
        data_dir = self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id))
        limit = self.part_size_for(store)
        # Multipart items first, one at a time, their parts on the pool (an item waiting on
        # the pool from inside the pool could starve it); then the one-put items, each a task.
        whole = hasattr(store, "put_file")
        one_put = {i for i in items if (whole or (data_dir / i).stat().st_size <= limit)
                   and "upload_id" not in (journal.get(f"{store.name}/{i}") or {})}
        for i in items:
            if i not in one_put:
                self.upload_item(store, ckpt_id, i, data_dir / i, stats, journal)
        futs = [self.pool.submit(self.upload_item, store, ckpt_id, i, data_dir / i, stats,
                                 journal) for i in items if i in one_put]
        errors = [err for f in futs if (err := f.exception()) is not None]
        journal.flush()
        if errors:
            raise errors[0]

    def upload_checkpoint(self, store: ObjectStore, manifest: Manifest, states: dict[str, float],
                          stats: UploadStats, journal: Journal,
                          commit: Committer | None = None) -> bool:
        """All items, then the commit (the write-once manifest: what makes it exist).

        Returns whether the checkpoint is now complete in `store` (one rank's part of a
        multi-rank save may be in while other ranks' parts are not yet)."""
        self.upload_items(store, manifest.id, [it.name for it in manifest.items], stats, journal)
        done = (commit or WholeCommit(self.tiers)).commit(store, manifest, states)
        self.events("manifest.commit", {"tier": store.name, "id": manifest.id})
        return done


class Committer(Protocol):
    """What makes the items just uploaded to a tier count there."""

    def commit(self, store: ObjectStore, manifest: Manifest, states: dict[str, float]) -> bool:
        ...


class WholeCommit:
    """A checkpoint saved by one process: its write-once manifest, then `latest`."""

    def __init__(self, tiers: Tiers) -> None:
        self.tiers = tiers

    def commit(self, store: ObjectStore, manifest: Manifest, states: dict[str, float]) -> bool:
        commit_manifest(store, self.tiers, manifest.for_tier(store.name, states))
        set_latest(store, self.tiers, manifest)
        return True


def commit_manifest(store: ObjectStore, tiers: Tiers, manifest: Manifest) -> None:
    key = tiers.layout.manifest(manifest.id)
    try:
        store.put(key, manifest.to_json(), if_absent=True)
    except AlreadyExists:
        existing = tiers.read_manifest(store, manifest.id)
        if existing is None or existing.save_uuid != manifest.save_uuid:
            raise CheckpointError(f"{store.name}: checkpoint {manifest.id} was committed by "
                                  f"another save; refusing to overwrite it") from None


def set_latest(store: ObjectStore, tiers: Tiers, manifest: Manifest) -> None:
    """Point `latest` at a committed manifest, never backwards (a resumed older save)."""
    key = tiers.layout.latest
    try:
        if parse_latest(store.get(key)).step > manifest.step:
            return
    except (ObjectMissing, ManifestInvalid):  # none yet, or a damaged one: replace it
        pass
    store.put(key, latest_json(manifest, os.getpid()))
