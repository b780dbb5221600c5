"""Read-through restore: local cache, region, other regions, archive; verify, fill, repair.

Every chunk is checked against the manifest hash wherever it came from. A chunk that fails
is fetched from the next tier and the bad copy is repaired (the local file in place; a remote
object by re-uploading the verified item). The manifest of a cached checkpoint is compared
with the first reachable remote one, so a checkpoint re-saved upstream is never served stale.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rackscale.checkpoint.errors import (
    CheckpointError,
    IntegrityError,
    ObjectMissing,
    StoreAuthError,
    StoreUnreachable,
    UnknownCheckpoint,
)
from rackscale.checkpoint.hashing import digest
from rackscale.checkpoint.manifest import Manifest
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.staging import decode_item, key_of
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import commit_manifest

DOWN = (StoreUnreachable, StoreAuthError)


@dataclass(slots=True)
class RestoreReport:
    id: str
    manifest_from: str
    served_by: dict[str, int] = field(default_factory=dict)  # tier -> chunks served
    bad_chunks: list[dict] = field(default_factory=list)  # {tier, item, chunk}
    repaired: list[str] = field(default_factory=list)  # "tier:item"
    unreachable: dict[str, str] = field(default_factory=dict)
    stale_cache_dropped: bool = False
    bytes: int = 0
    seconds: float = 0.0

    @property
    def tier(self) -> str:
        """The tier that served most of the bytes (what an operator asks first)."""
        return max(self.served_by, key=self.served_by.__getitem__) if self.served_by else "-"

    def as_dict(self) -> dict:
        return asdict(self) | {"tier": self.tier}


class Restorer:
    def __init__(self, tiers: Tiers, *, progress: Callable[[int], None] | None = None) -> None:
        self.tiers = tiers
        self.progress = progress
        self._down: dict[str, str] = {}  # tier -> why it is skipped for this restorer
        self._errors: dict[str, Exception] = {}
        self._lock = threading.Lock()

    # --- which checkpoint, which manifest -----------------------------------------------------
    def _try(self, store: ObjectStore, fn: Callable[[], Any]) -> Any:
        if store.name in self._down:
            return None
        try:
            return fn()
        except DOWN as err:
            self._down[store.name] = str(err)
            self._errors[store.name] = err
            return None

    def list_ids(self) -> list[str]:
        ids: set[str] = set()
        for s in self.tiers.all:
            got = self._try(s, lambda s=s: self.tiers.committed_ids(s))
            ids.update(got or [])
        return sorted(ids)

    def resolve_id(self, ckpt_id: str) -> str:
        if ckpt_id != "latest":
            return ckpt_id
        best: tuple[int, str] | None = None
        for s in self.tiers.all:
            raw = self._try(s, lambda s=s: s.get(self.tiers.layout.latest)
                            if s.head(self.tiers.layout.latest) else None)
            if raw:
                ptr = json.loads(raw)
                if best is None or ptr["step"] > best[0]:
                    best = (int(ptr["step"]), ptr["id"])
        if best is None:
            ids = self.list_ids()
            if not ids:
                raise UnknownCheckpoint("latest", [])
            return ids[-1]
        return best[1]

    def manifest(self, ckpt_id: str) -> tuple[Manifest, str, bool]:
        """(manifest, tier it came from, whether a stale local copy was dropped)."""
        local = self.tiers.read_manifest(self.tiers.local, ckpt_id)
        for s in self.tiers.remote:
            m = self._try(s, lambda s=s: self.tiers.read_manifest(s, ckpt_id))
            if m is None:
                continue
            if local is not None and local.save_uuid != m.save_uuid:
                self._drop_local(ckpt_id)
                return m, s.name, True
            return (local, "local", False) if local is not None else (m, s.name, False)
        if local is not None:
            return local, "local", False
        known = self.list_ids()
        if self._down and not known:
            # Nothing answered: say why, not "unknown id" (the id may well exist there).
            kind = type(next(iter(self._errors.values())))
            raise kind(f"checkpoint {ckpt_id!r} not found and no remote tier answered: "
                       f"{'; '.join(self._down.values())}")
        raise UnknownCheckpoint(ckpt_id, known)

    def _drop_local(self, ckpt_id: str) -> None:
        self.tiers.local.delete(self.tiers.layout.manifest(ckpt_id))
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id)))

    # --- restore ------------------------------------------------------------------------------
    def restore(self, ckpt_id: str = "latest") -> RestoreReport:
        t0 = time.perf_counter()
        ckpt_id = self.resolve_id(ckpt_id)
        # Several ranks of one node restore the same checkpoint into one cache: the fill is
        # serialised, and the ranks after the first find it complete and verified.
        with self.tiers.lease(ckpt_id), self.tiers.fill_lock(ckpt_id):
            m, source, stale = self.manifest(ckpt_id)
            report = RestoreReport(id=ckpt_id, manifest_from=source, stale_cache_dropped=stale)
            served: Counter[str] = Counter()
            bad_remote: set[str] = set()
            data_dir = self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id))
            data_dir.mkdir(parents=True, exist_ok=True)
            tasks = []
            for it in m.items:
                path = data_dir / it.name
                if not path.exists() or path.stat().st_size != it.size:
                    part = path.with_name(f".{it.name}.partial")
                    with open(part, "wb") as f:
                        f.truncate(it.size)
                    path = part
                tasks.extend((it, i, path) for i in range(len(it.chunks)))
            # Cached chunks are checked inline (a pool costs more than a local read); what is
            # missing or bad locally is fetched with parallel ranged GETs.
            remote_tasks = []
            for t in tasks:
                if not t[2].name.endswith(".partial") and self._local_ok(m, *t):
                    served["local"] += 1
                else:
                    remote_tasks.append(t)
            if remote_tasks:
                with ThreadPoolExecutor(self.tiers.cfg.restore_parallelism) as pool:
                    for tier in pool.map(lambda t: self._chunk(m, *t, report, bad_remote),
                                         remote_tasks):
                        served[tier] += 1
            for it in m.items:
                part = data_dir / f".{it.name}.partial"
                if part.exists():
                    os.replace(part, data_dir / it.name)
            if source != "local":
                commit_manifest(self.tiers.local, self.tiers, m.for_tier("local", m.states))
            for key in sorted(bad_remote):
                tier, item = key.split(":", 1)
                self._repair_remote(self.tiers.store(tier), m, item, data_dir / item)
                report.repaired.append(key)
            report.served_by = dict(served)
            report.unreachable = dict(self._down)
            report.bytes = m.total_bytes
            report.seconds = time.perf_counter() - t0
            return report

    def _local_ok(self, m: Manifest, it: Any, i: int, path: Path) -> bool:
        start = i * m.chunk_size
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(min(m.chunk_size, it.size - start))
        if digest(data, m.algo) == it.chunks[i]:
            self._tick(len(data))
            return True
        return False

    def _chunk(self, m: Manifest, it: Any, i: int, path: Path, report: RestoreReport,
               bad_remote: set[str]) -> str:
        cs = m.chunk_size
        start, end = i * cs, min((i + 1) * cs, it.size)
        if not path.name.endswith(".partial"):
            with open(path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
            if digest(data, m.algo) == it.chunks[i]:
                self._tick(len(data))
                return "local"
            with self._lock:
                report.bad_chunks.append({"tier": "local", "item": it.name, "chunk": i})
                report.repaired.append(f"local:{it.name}#{i}")
        key = self.tiers.layout.data(m.id, it.name)
        for s in self.tiers.remote:
            try:
                data = self._try(s, lambda s=s: s.get(key, start, end))
            except ObjectMissing:
                continue
            if data is None:
                continue
            if digest(data, m.algo) != it.chunks[i]:
                with self._lock:
                    report.bad_chunks.append({"tier": s.name, "item": it.name, "chunk": i})
                    bad_remote.add(f"{s.name}:{it.name}")
                continue
            # No fsync: the cache is never trusted, every read re-verifies every chunk, so
            # a torn cache file after a crash is just a miss.
            fd = os.open(path, os.O_WRONLY)
            try:
                os.pwrite(fd, data, start)
            finally:
                os.close(fd)
            self._tick(len(data))
            return s.name
        raise IntegrityError(f"checkpoint {m.id}: no reachable tier holds a good copy of chunk "
                             f"{i} of {it.name} (unreachable: {self._down or 'none'}); nothing "
                             f"was changed")

    def _tick(self, n: int) -> None:
        if self.progress:
            self.progress(n)

    def _repair_remote(self, store: ObjectStore, m: Manifest, item: str, src: Path) -> None:
        """Objects are immutable: repair = upload the verified local copy over the bad one."""
        key = self.tiers.layout.data(m.id, item)
        size = src.stat().st_size
        part = max(self.tiers.cfg.part_size, store.min_part_size)
        upload_id = store.create_upload(key)
        parts = {}
        with open(src, "rb") as f:
            for n in range(1, max(1, -(-size // part)) + 1):
                parts[n] = store.upload_part(key, upload_id, n, f.read(part))
        store.complete_upload(key, upload_id, parts)

    # --- helpers for callers ------------------------------------------------------------------
    def load_state(self, ckpt_id: str = "latest") -> tuple[dict[str, Any], RestoreReport]:
        report = self.restore(ckpt_id)
        m = self.tiers.read_manifest(self.tiers.local, report.id)
        if m is None:
            raise CheckpointError(f"restore of {report.id} left no local manifest")
        data_dir = self.tiers.local.path(self.tiers.layout.data_prefix(report.id))
        state = {it.meta.get("key", key_of(it.name)):
                 decode_item((data_dir / it.name).read_bytes(), it.meta) for it in m.items}
        return state, report

    def verify(self, ckpt_id: str, store: ObjectStore) -> dict:
        """Check every chunk of one tier's copy against the manifest; changes nothing."""
        m, _, _ = self.manifest(self.resolve_id(ckpt_id))
        bad = []
        for it in m.items:
            key = self.tiers.layout.data(m.id, it.name)
            for i, h in enumerate(it.chunks):
                s, e = i * m.chunk_size, min((i + 1) * m.chunk_size, it.size)
                try:
                    ok = digest(store.get(key, s, e), m.algo) == h
                except ObjectMissing:
                    return {"tier": store.name, "id": m.id, "ok": False, "missing": True,
                            "bad_chunks": []}
                if not ok:
                    bad.append({"item": it.name, "chunk": i})
        return {"tier": store.name, "id": m.id, "ok": not bad, "missing": False,
                "bad_chunks": bad, "hash": m.hash}
