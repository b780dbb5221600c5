"""Parallel multipart upload that resumes from its journal, and the manifest commit.

The journal records, per (tier, item), the upload id and the ETag of every acknowledged part,
written durably after each part. A restarted saver asks the store which parts it holds
(`list_parts`), keeps those whose ETag matches the journal and sends only the rest, so a kill
costs at most the parts that were in flight, never the whole upload.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rackscale.checkpoint.errors import (
    AlreadyExists,
    CheckpointError,
    ManifestInvalid,
    ObjectMissing,
)
from rackscale.checkpoint.manifest import Manifest, latest_json, parse_latest
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.tiers import Tiers

EventHook = Callable[[str, dict], None]


def _noop(_kind: str, _data: dict) -> None:
    return None


@dataclass(slots=True)
class UploadStats:
    parts_sent: int = 0
    parts_skipped: int = 0  # already on the store from an interrupted run
    bytes_sent: int = 0
    resumed_uploads: int = 0


class Uploader:
    def __init__(self, tiers: Tiers, pool: ThreadPoolExecutor, *, events: EventHook = _noop,
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
                    stats: UploadStats, journal: dict) -> None:
        key = self.tiers.layout.data(ckpt_id, item)
        size = src.stat().st_size
        part_size = self.part_size_for(store)
        jkey = f"{store.name}/{item}"
        entry = journal.get(jkey)
        if entry and entry.get("done"):
            return
        have: dict[int, str] = {}
        if entry:
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
                    self._journal_set(ckpt_id, journal, jkey, {**entry, "done": True})
                    return
                entry = None
        if not entry:
            entry = {"upload_id": store.create_upload(key), "parts": {}, "part_size": part_size}
            self._journal_set(ckpt_id, journal, jkey, entry)
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
            with self._jlock:
                entry["parts"][str(n)] = etag
                stats.parts_sent += 1
                stats.bytes_sent += len(data)
                self.tiers.write_journal(ckpt_id, journal)
            self.events("upload.part", {"tier": store.name, "item": item, "part": n})
            if self.progress:
                self.progress(len(data))
            return n, etag

        for n, etag in (f.result() for f in [self.pool.submit(send, n) for n in todo]):
            have[n] = etag
        self._journal_set(ckpt_id, journal, jkey, {**entry, "completing": True})
        store.complete_upload(key, entry["upload_id"], have)
        self._journal_set(ckpt_id, journal, jkey, {**entry, "completing": True, "done": True})
        self.events("upload.complete", {"tier": store.name, "item": item})

    def _journal_set(self, ckpt_id: str, journal: dict, jkey: str, entry: dict) -> None:
        with self._jlock:
            journal[jkey] = entry
            self.tiers.write_journal(ckpt_id, journal)

    def upload_checkpoint(self, store: ObjectStore, manifest: Manifest, states: dict[str, float],
                          stats: UploadStats, journal: dict) -> None:
        """All items, then the write-once manifest: the manifest is what makes it exist."""
        data_dir = self.tiers.local.path(self.tiers.layout.data_prefix(manifest.id))
        for it in manifest.items:
            self.upload_item(store, manifest.id, it.name, data_dir / it.name, stats, journal)
        commit_manifest(store, self.tiers, manifest.for_tier(store.name, states))
        self.events("manifest.commit", {"tier": store.name, "id": manifest.id})


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
