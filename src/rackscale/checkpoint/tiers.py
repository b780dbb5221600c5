"""The tier set of one saver/reader: local cache, region, replicas, archive; plus the local
bookkeeping that must survive kill -9: the catalog (state history), the upload journal
(upload ids and part ETags) and leases (flock files that keep retention off a checkpoint).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.errors import CheckpointError, ManifestInvalid, ObjectMissing
from rackscale.checkpoint.journal import Journal, replay
from rackscale.checkpoint.manifest import Layout, Manifest
from rackscale.checkpoint.objectstore import (
    LocalDirStore,
    ObjectStore,
    fsync_dirs,
    write_durable,
)


class Tiers:
    def __init__(self, cfg: TiersConfig, *, stores: dict[str, ObjectStore] | None = None):
        self.cfg = cfg
        # A job's bookkeeping (catalog, journal, leases, quarantine) and cache live apart from
        # every other job's on a shared `local_dir`: they are keyed by checkpoint id, and
        # step ids are the same in every job.
        self.job = cfg.job
        self.root = Path(cfg.local_dir) / "jobs" / cfg.job if cfg.job else Path(cfg.local_dir)
        self.layout = Layout(f"{cfg.prefix}/jobs/{cfg.job}" if cfg.job else cfg.prefix)
        self.local = LocalDirStore(self.root / "cache", name="local", sync=cfg.fsync)
        given = stores or {}
        self.region = given.get(cfg.region.name) or cfg.region.build()
        self.replicas = [given.get(r.name) or r.build() for r in cfg.replicas]
        self.archive = (given.get(cfg.archive.name) or cfg.archive.build()) if cfg.archive else None
        # The catalog, journal and lease directories are made on first write, not here: a
        # read-only command (`checkpoint ls`) must leave the disk as it found it.
        self._lock = threading.Lock()

    @property
    def remote(self) -> list[ObjectStore]:
        """Read-through order after the local cache: region, other regions, archive."""
        return [self.region, *self.replicas, *([self.archive] if self.archive else [])]

    @property
    def all(self) -> list[ObjectStore]:
        return [self.local, *self.remote]

    def store(self, name: str) -> ObjectStore:
        for s in self.all:
            if s.name == name:
                return s
        raise CheckpointError(f"unknown tier {name!r}; tiers: {[s.name for s in self.all]}")

    # --- catalog: the full state history of each checkpoint saved from this node -------------
    # `tag` tells apart the ranks of one save that share a node ("" for a whole checkpoint and
    # for the coordinator rank of a multi-rank save, "@r<rank>" for the others).
    def catalog_path(self, ckpt_id: str, tag: str = "") -> Path:
        return self.root / "catalog" / f"{ckpt_id}{tag}.json"

    def read_catalog(self, ckpt_id: str, tag: str = "") -> dict[str, Any] | None:
        """The saver's history of `ckpt_id`, None if there is none. A damaged entry is an error
        (the saver decides from it what to delete), never a silent empty history."""
        path = self.catalog_path(ckpt_id, tag)
        try:
            entry = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (ValueError, UnicodeDecodeError) as err:
            raise CheckpointError(f"catalog entry {path} is damaged ({err}); move it aside: "
                                  f"the checkpoint's manifests are not affected") from None
        if not isinstance(entry, dict):
            raise CheckpointError(f"catalog entry {path} is not a JSON object; move it aside")
        return entry

    def write_catalog(self, ckpt_id: str, entry: dict[str, Any], tag: str = "", *,
                      sync: bool = True) -> None:
        with self._lock:
            write_durable(self.catalog_path(ckpt_id, tag),
                          json.dumps(entry, indent=1).encode(), sync=self.cfg.fsync and sync)

    def catalog_keys(self) -> list[tuple[str, str]]:
        """(id, tag) of every catalog entry on this node."""
        out = []
        for p in (self.root / "catalog").glob("*.json"):
            ckpt_id, at, rank = p.stem.partition("@")
            out.append((ckpt_id, at + rank))
        return sorted(out)

    # --- upload journal: resume a multipart upload by upload id and part ETags ---------------
    def journal_path(self, ckpt_id: str, tag: str = "") -> Path:
        return self.root / "journal" / f"{ckpt_id}{tag}.jsonl"

    def open_journal(self, ckpt_id: str, save_uuid: str, tag: str = "") -> Journal:
        return Journal(self.journal_path(ckpt_id, tag), save_uuid, sync=self.cfg.fsync)

    def read_journal(self, ckpt_id: str) -> dict[str, dict[str, Any]]:
        """Every entry of every rank's journal of `ckpt_id` on this node (read-only)."""
        out: dict[str, dict[str, Any]] = {}
        for p in sorted((self.root / "journal").glob(f"{ckpt_id}*.jsonl")):
            if p.stem == ckpt_id or p.stem.startswith(f"{ckpt_id}@"):
                out.update({f"{p.stem}:{k}": v for k, v in replay(p)[1].items()})
        return out

    def drop_journal(self, ckpt_id: str, tag: str = "") -> None:
        with contextlib.suppress(FileNotFoundError):
            self.journal_path(ckpt_id, tag).unlink()

    # --- leases: a shared flock while saving/restoring; retention needs it exclusively -------
    def lease_path(self, ckpt_id: str, suffix: str = ".lock") -> Path:
        leases = self.root / "leases"
        leases.mkdir(parents=True, exist_ok=True)
        return leases / f"{ckpt_id}{suffix}"

    @contextlib.contextmanager
    def lease(self, ckpt_id: str) -> Iterator[None]:
        """Held for the whole save or restore; the kernel drops it if the process dies."""
        fd = os.open(self.lease_path(ckpt_id), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def fill_lock(self, ckpt_id: str) -> Iterator[None]:
        fd = os.open(self.lease_path(ckpt_id, ".fill"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def try_exclusive(self, ckpt_id: str) -> Iterator[bool]:
        fd = os.open(self.lease_path(ckpt_id), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    # --- manifests --------------------------------------------------------------------------
    def read_manifest(self, store: ObjectStore, ckpt_id: str) -> Manifest | None:
        """The checked manifest of `ckpt_id` in `store`, None if it has none; one that does not
        check out raises ManifestInvalid naming the tier (the caller decides what to skip)."""
        key = self.layout.manifest(ckpt_id)
        try:
            raw = store.get(key)
        except ObjectMissing:
            return None
        m = Manifest.from_json(raw, expect_id=ckpt_id, where=f"{store.name}: {key}")
        if self.job is not None and m.job != self.job:
            # Only a copy moved by hand can be here (the key space is the job's own): never
            # resume it, whatever it holds.
            owner = (f"job {m.job!r}" if m.job
                     else "no job (saved before checkpoints named their job)")
            raise ManifestInvalid(f"{store.name}: {key}: checkpoint {ckpt_id} belongs to "
                                  f"{owner}, not to job {self.job!r}; a job resumes only its "
                                  f"own checkpoints")
        return m

    def quarantine(self, ckpt_id: str) -> Path | None:
        """Set a bad local copy aside (manifest and data) under `quarantine/`, so nothing reads
        it again and an operator can still look at it; returns where it went."""
        src = self.local.path(self.layout.ckpt_prefix(ckpt_id))
        if not src.exists():
            return None
        dest = self.root / "quarantine" / f"{ckpt_id}.{time.strftime('%Y%m%dT%H%M%S')}"
        dest = dest.with_name(f"{dest.name}.{uuid.uuid4().hex[:6]}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dest)  # the manifest goes with it: from now on the cache has no copy
        if self.cfg.fsync:
            fsync_dirs(src.parent, self.local.root)
        return dest

    def committed_ids(self, store: ObjectStore) -> list[str]:
        return self.layout.ids_from_keys(store.list(self.layout.prefix + "/"))
