"""Read-through restore: local cache, region, other regions, archive; verify, fill, repair.

Every chunk is checked against the manifest hash wherever it came from. A chunk that fails
is fetched from the next tier and the bad copy is repaired (the local file in place; a remote
object by re-uploading the verified item). The manifest of a cached checkpoint is compared
with the first reachable remote one, so a checkpoint re-saved upstream is never served stale.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rackscale.checkpoint.errors import (
    CheckpointError,
    IntegrityError,
    ManifestInvalid,
    ObjectMissing,
    StoreAuthError,
    StoreUnreachable,
    UnknownCheckpoint,
)
from rackscale.checkpoint.hashing import digest
from rackscale.checkpoint.manifest import ItemEntry, LatestPointer, Manifest, parse_latest
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.staging import decode_item, key_of
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import commit_manifest

DOWN = (StoreUnreachable, StoreAuthError)
_T = TypeVar("_T")


@dataclass(slots=True)
class RestoreReport:
    id: str
    manifest_from: str
    served_by: dict[str, int] = field(default_factory=dict)  # tier -> chunks served
    bad_chunks: list[dict[str, Any]] = field(default_factory=list)  # {tier, item, chunk}
    bad_sizes: list[dict[str, Any]] = field(default_factory=list)  # {tier, item, size, expected}
    # {tier, item}: a tier that holds the checkpoint's manifest but not this object (another
    # tier served it; the object is copied back to the tier, see `repaired`)
    missing: list[dict[str, Any]] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)  # "tier:item"
    unreachable: dict[str, str] = field(default_factory=dict)
    bad_manifests: dict[str, str] = field(default_factory=dict)  # tier -> why it was skipped
    bad_latest: dict[str, str] = field(default_factory=dict)  # tier -> why its pointer lost
    quarantined: list[str] = field(default_factory=list)  # where bad local copies went
    stale_cache_dropped: bool = False
    bytes: int = 0
    seconds: float = 0.0

    @property
    def tier(self) -> str:
        """The tier that served most of the bytes (what an operator asks first)."""
        return max(self.served_by, key=self.served_by.__getitem__) if self.served_by else "-"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tier": self.tier}


class Restorer:
    def __init__(self, tiers: Tiers, *, progress: Callable[[int], None] | None = None,
                 like: Restorer | None = None) -> None:
        self.tiers = tiers
        self.progress = progress
        # tier -> why it is skipped for this restorer; `like`: one of the same command that
        # already found tiers down, so that they are not waited on a second time
        self._down: dict[str, str] = dict(like._down) if like else {}
        self._errors: dict[str, Exception] = dict(like._errors) if like else {}
        self.bad_manifests: dict[str, dict[str, str]] = {}  # id -> tier -> why
        self.bad_latest: dict[str, str] = {}
        self.quarantined: list[str] = []
        self._sizes: dict[tuple[str, str], int | None] = {}
        self._holds: dict[tuple[str, str], bool] = {}  # (tier, id) -> holds this save
        self._lock = threading.Lock()

    # --- which checkpoint, which manifest -----------------------------------------------------
    def _try(self, store: ObjectStore, fn: Callable[[], _T]) -> _T | None:
        if store.name in self._down:
            return None
        try:
            return fn()
        except DOWN as err:
            self._down[store.name] = str(err)
            self._errors[store.name] = err
            return None

    def ask(self, store: ObjectStore, fn: Callable[[], Any]) -> Any:
        """`fn()` on `store` unless the tier is already known down; None when it is (or goes
        down now: it is recorded, and no later call of this restorer waits on it)."""
        return self._try(store, fn)

    @property
    def unreachable(self) -> dict[str, str]:
        return dict(self._down)

    def list_ids(self) -> list[str]:
        ids: set[str] = set()
        for s in self.tiers.all:
            got = self._try(s, functools.partial(self.tiers.committed_ids, s))
            ids.update(got or [])
        return sorted(ids)

    def _read(self, store: ObjectStore, ckpt_id: str) -> Manifest | None:
        """One tier's manifest; a bad one is recorded and skipped like a missing one."""
        def read() -> Manifest | None:
            try:
                return self.tiers.read_manifest(store, ckpt_id)
            except ManifestInvalid as err:
                with self._lock:
                    self.bad_manifests.setdefault(ckpt_id, {})[store.name] = str(err)
                return None
        return self._try(store, read)

    def _get_latest(self, store: ObjectStore) -> bytes | None:
        try:
            return store.get(self.tiers.layout.latest)
        except ObjectMissing:
            return None

    def resolve_id(self, ckpt_id: str) -> str:
        """`latest` = the newest pointer that names a checkpoint some tier holds at that step;
        a tier whose pointer is garbage or names nothing is recorded and outvoted."""
        if ckpt_id != "latest":
            return ckpt_id
        ptrs: list[tuple[LatestPointer, str]] = []
        for s in self.tiers.all:
            raw = self._try(s, functools.partial(self._get_latest, s))
            if raw is None:
                continue
            try:
                ptrs.append((parse_latest(raw, f"{s.name}: {self.tiers.layout.latest}"), s.name))
            except ManifestInvalid as err:
                self.bad_latest[s.name] = str(err)
        verdicts: dict[tuple[str, int], str | None] = {}
        for ptr, tier in sorted(ptrs, key=lambda p: -p[0].step):
            key = (ptr.id, ptr.step)
            if key not in verdicts:
                verdicts[key] = self._pointer_problem(ptr)
            if verdicts[key] is None:
                return ptr.id
            self.bad_latest[tier] = f"{tier}: latest {verdicts[key]}"
        ids = self.list_ids()
        if not ids:
            raise UnknownCheckpoint("latest", [])
        return ids[-1]

    def _pointer_problem(self, ptr: LatestPointer) -> str | None:
        try:
            m = self.manifest(ptr.id)[0]
        except UnknownCheckpoint:
            return f"points at {ptr.id}, which no tier holds"
        except ManifestInvalid:
            return f"points at {ptr.id}, whose manifests are all damaged"
        except DOWN:
            return f"points at {ptr.id}, but no tier that might hold it answered"
        except CheckpointError as err:  # any other reason its checkpoint cannot be read
            return f"points at {ptr.id}, which cannot be read ({err})"
        if m.step != ptr.step:
            return f"says step {ptr.step} but {ptr.id} is step {m.step}"
        return None

    def manifest(self, ckpt_id: str, *, fix_cache: bool = False) -> tuple[Manifest, str, bool]:
        """(manifest, tier it came from, whether the local copy was another save).

        The local cache is checked against the first remote manifest that checks out: another
        save_uuid means stale, the same save with another hash means damaged. With `fix_cache`
        (restore) a stale copy is dropped and a damaged one quarantined; read-only commands
        only skip it.
        """
        local = self._read(self.tiers.local, ckpt_id)
        if local is None and "local" in self.bad_manifests.get(ckpt_id, {}) and fix_cache:
            self._quarantine(ckpt_id)
        for s in self.tiers.remote:
            m = self._read(s, ckpt_id)
            if m is None:
                continue
            if local is None:
                return m, s.name, False
            if local.save_uuid != m.save_uuid:
                if fix_cache:
                    self._drop_local(ckpt_id)
                return m, s.name, True
            if local.hash != m.hash:
                self.bad_manifests.setdefault(ckpt_id, {})["local"] = (
                    f"local manifest of {ckpt_id} has hash {local.hash[:16]} but {s.name} "
                    f"has {m.hash[:16]} for the same save")
                if fix_cache:
                    self._quarantine(ckpt_id)
                return m, s.name, False
            return local, "local", False
        if local is not None:
            return local, "local", False
        return self._no_manifest(ckpt_id)

    def _no_manifest(self, ckpt_id: str) -> tuple[Manifest, str, bool]:
        bad = self.bad_manifests.get(ckpt_id)
        if bad:
            raise ManifestInvalid(f"checkpoint {ckpt_id!r}: no tier holds a manifest that checks "
                                  f"out ({'; '.join(bad.values())})")
        known = self.list_ids()
        if self._down and not known:
            # Nothing answered: say why, not "unknown id" (the id may well exist there).
            kind = type(next(iter(self._errors.values())))
            raise kind(f"checkpoint {ckpt_id!r} not found and no remote tier answered: "
                       f"{'; '.join(self._down.values())}")
        raise UnknownCheckpoint(ckpt_id, known)

    def _quarantine(self, ckpt_id: str) -> None:
        where = self.tiers.quarantine(ckpt_id)
        if where is not None:
            self.quarantined.append(str(where))

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
            m, source, stale = self.manifest(ckpt_id, fix_cache=True)
            report = RestoreReport(id=ckpt_id, manifest_from=source, stale_cache_dropped=stale)
            bad_remote: set[str] = set()
            data_dir = self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id))
            served = self._fill(m, data_dir, report, bad_remote)
            if set(served) - {self.tiers.region.name}:
                # Served past the region tier, which was never asked for these items: an
                # object deleted there would stay gone. One HEAD per item finds it.
                for it in m.items:
                    self._size_ok(self.tiers.region, m, it, report, bad_remote)
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
            report.bad_manifests = dict(self.bad_manifests.get(ckpt_id, {}))
            report.bad_latest = dict(self.bad_latest)
            report.quarantined = list(self.quarantined)
            report.bytes = m.total_bytes
            report.seconds = time.perf_counter() - t0
            return report

    def _fill(self, m: Manifest, data_dir: Path, report: RestoreReport,
              bad_remote: set[str]) -> Counter[str]:
        """Every chunk of every item into `data_dir`, each checked against the manifest."""
        served: Counter[str] = Counter()
        data_dir.mkdir(parents=True, exist_ok=True)
        tasks: list[tuple[ItemEntry, int, Path]] = []
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
            def fetch(t: tuple[ItemEntry, int, Path]) -> str:
                return self._chunk(m, *t, report, bad_remote)
            with ThreadPoolExecutor(self.tiers.cfg.restore_parallelism) as pool:
                for tier in pool.map(fetch, remote_tasks):
                    served[tier] += 1
        return served

    def _local_ok(self, m: Manifest, it: ItemEntry, i: int, path: Path) -> bool:
        start = i * m.chunk_size
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(min(m.chunk_size, it.size - start))
        if digest(data, m.algo) == it.chunks[i]:
            self._tick(len(data))
            return True
        return False

    def _object_size(self, store: ObjectStore, m: Manifest, it: ItemEntry) -> int | None:
        """Size of a tier's object for an item (None: the tier has none), asked once."""
        key = (store.name, it.name)
        if key not in self._sizes:
            info = store.head(self.tiers.layout.data(m.id, it.name))
            with self._lock:
                self._sizes[key] = None if info is None else info.size
        return self._sizes[key]

    def _size_ok(self, store: ObjectStore, m: Manifest, it: ItemEntry, report: RestoreReport,
                 bad_remote: set[str]) -> bool:
        """A tier whose object is longer or shorter than the item is not that item, whatever
        its first chunks hash to: it serves none of the item's chunks."""
        size = self._try(store, lambda: self._object_size(store, m, it))
        if size is None:
            if store.name not in self._down and self._holds_save(store, m):
                # Committed there, yet the object is gone: say so, and copy it back.
                with self._lock:
                    if f"{store.name}:{it.name}" not in bad_remote:
                        report.missing.append({"tier": store.name, "item": it.name})
                        bad_remote.add(f"{store.name}:{it.name}")
            return False
        if size != it.size:
            with self._lock:
                if f"{store.name}:{it.name}" not in bad_remote:
                    report.bad_sizes.append({"tier": store.name, "item": it.name, "size": size,
                                             "expected": it.size})
                    bad_remote.add(f"{store.name}:{it.name}")
            return False
        return True

    def _holds_save(self, store: ObjectStore, m: Manifest) -> bool:
        """Whether `store` has a manifest of this very save (a tier without one simply does
        not hold the checkpoint: nothing is missing there). Asked once per tier."""
        key = (store.name, m.id)
        if key not in self._holds:
            own = self._read(store, m.id)
            with self._lock:
                self._holds[key] = own is not None and (own.save_uuid, own.hash) == (
                    m.save_uuid, m.hash)
        return self._holds[key]

    def _chunk(self, m: Manifest, it: ItemEntry, i: int, path: Path, report: RestoreReport,
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
            if not self._size_ok(s, m, it, report, bad_remote):
                continue
            try:
                got = b"" if end <= start else self._try(
                    s, functools.partial(s.get, key, start, end))
            except ObjectMissing:
                continue
            if got is None:
                continue
            data = got
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
                             f"{i} of {it.name} (unreachable: {self._down or 'none'}; wrong "
                             f"size: {report.bad_sizes or 'none'}); nothing was changed")

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

    def verify(self, ckpt_id: str, store: ObjectStore) -> dict[str, Any]:
        """Check one tier's copy: its own manifest, each object's size, every chunk; and that
        it is the same save as the reference manifest. Changes nothing."""
        ckpt_id = self.resolve_id(ckpt_id)
        out: dict[str, Any] = {"tier": store.name, "id": ckpt_id, "status": "ok", "ok": False,
                               "missing": [], "bad_sizes": [], "bad_chunks": [], "hash": None,
                               "version": None, "error": None}
        try:
            own = self.tiers.read_manifest(store, ckpt_id)
            if own is None:
                return out | {"status": "absent", "error": f"{store.name} holds no manifest "
                                                           f"of {ckpt_id}"}
            out |= {"hash": own.hash, "version": own.version}
            self._verify_data(own, store, out)
        except ManifestInvalid as err:
            return out | {"status": "bad-manifest", "error": str(err)}
        except DOWN as err:
            return out | {"status": "unreachable", "error": str(err)}
        if out["missing"]:
            out["status"] = "missing"
        elif out["bad_sizes"] or out["bad_chunks"]:
            out["status"] = "corrupt"
        else:
            ref = self._reference(ckpt_id)
            if ref is not None and (ref[0].save_uuid, ref[0].hash) != (own.save_uuid, own.hash):
                out |= {"status": "differs", "error": f"{store.name} holds another copy "
                        f"(hash {own.hash[:16]}) than {ref[1]} (hash {ref[0].hash[:16]})"}
        out["ok"] = out["status"] == "ok"
        return out

    def _reference(self, ckpt_id: str) -> tuple[Manifest, str] | None:
        try:
            m, src, _ = self.manifest(ckpt_id)
        except CheckpointError:
            return None
        return m, src

    def _verify_data(self, m: Manifest, store: ObjectStore, out: dict[str, Any]) -> None:
        for it in m.items:
            key = self.tiers.layout.data(m.id, it.name)
            info = store.head(key)
            if info is None:
                out["missing"].append(it.name)
                continue
            if info.size != it.size:
                out["bad_sizes"].append({"item": it.name, "size": info.size,
                                         "expected": it.size})
                continue
            for i, h in enumerate(it.chunks):
                s, e = i * m.chunk_size, min((i + 1) * m.chunk_size, it.size)
                try:
                    data = store.get(key, s, e) if e > s else b""
                except ObjectMissing:  # deleted while we read: as missing as never written
                    out["missing"].append(it.name)
                    break
                if digest(data, m.algo) != h:
                    out["bad_chunks"].append({"item": it.name, "chunk": i})
