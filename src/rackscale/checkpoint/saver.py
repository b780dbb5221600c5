"""Async save: stage to host memory, then persist, upload, replicate and archive in the back.

`CheckpointManager.save()` returns as soon as the state is in host memory (the training
stall); one background worker then writes the local NVMe copy and commits its manifest,
uploads to the region with parallel multipart parts, copies to the other regions in parallel,
archives every m-th checkpoint, and advances the checkpoint's state with a time at each step.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.errors import CheckpointError, ManifestInvalid
from rackscale.checkpoint.hashing import chunk_hashes, combine
from rackscale.checkpoint.manifest import CkptState, ItemEntry, Manifest, advance, ckpt_id_for
from rackscale.checkpoint.objectstore import ObjectStore, fsync_dirs, write_durable
from rackscale.checkpoint.staging import StagedItem, StagingPool
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import EventHook, Uploader, UploadStats, _noop, commit_manifest
from rackscale.checkpoint.upload import set_latest as _set_latest


@dataclass(slots=True)
class SaveReport:
    id: str
    step: int
    action: str  # "saved" | "waited" (back-pressure made the caller wait) | "skipped"
    stall_s: float = 0.0
    waited_s: float = 0.0
    states: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    stats: UploadStats = field(default_factory=UploadStats)
    hash: str = ""
    total_bytes: int = 0

    @property
    def rpo_s(self) -> float | None:
        """Seconds from staging until the copy survived the node (region commit)."""
        s = self.states
        return s["region"] - s["staged"] if "region" in s and "staged" in s else None

    def as_dict(self) -> dict:
        return asdict(self) | {"rpo_s": self.rpo_s}


class SaveHandle:
    def __init__(self, report: SaveReport, future: Future | None = None) -> None:
        self.report = report
        self._future = future

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def wait(self, timeout: float | None = None) -> SaveReport:
        if self._future is not None:
            self._future.result(timeout)
        return self.report


class CheckpointManager:
    def __init__(self, cfg: TiersConfig | Tiers, *, events: EventHook = _noop,
                 progress: Callable[[int], None] | None = None) -> None:
        self.tiers = cfg if isinstance(cfg, Tiers) else Tiers(cfg)
        self.cfg = self.tiers.cfg
        self.events = events
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ckpt-save")
        self._parts = ThreadPoolExecutor(self.cfg.upload_parallelism,
                                         thread_name_prefix="ckpt-part")
        self._tierpool = ThreadPoolExecutor(max(1, len(self.tiers.remote)),
                                            thread_name_prefix="ckpt-tier")
        self.uploader = Uploader(self.tiers, self._parts, events=events, progress=progress)
        self.staging = StagingPool()
        self._inflight: SaveHandle | None = None

    def close(self) -> None:
        """Wait for the last save, then stop the threads; a failed save still raises here,
        but only after the pools are shut down (they would otherwise leak per manager)."""
        try:
            if self._inflight is not None:
                self._inflight.wait()
        finally:
            for pool in (self._worker, self._tierpool, self._parts):
                pool.shutdown(wait=True)

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- the training-loop side --------------------------------------------------------------
    def save(self, step: int, state: Mapping[str, Any], *, ckpt_id: str | None = None,
             policy: str | None = None) -> SaveHandle:
        """Stage `state` in host memory and return; everything else runs in the background."""
        t0 = time.perf_counter()
        ckpt_id = ckpt_id or ckpt_id_for(step)
        policy = policy or self.cfg.backpressure
        waited = 0.0
        action = "saved"
        if self._inflight is not None and not self._inflight.done():
            if policy == "skip":
                self.events("save.skipped", {"id": ckpt_id})
                return SaveHandle(SaveReport(id=ckpt_id, step=step, action="skipped"))
            self._inflight.wait()
            waited = time.perf_counter() - t0
            action = "waited"
        items = self.staging.stage(state)
        report = SaveReport(id=ckpt_id, step=step, action=action, waited_s=waited)
        advance(report.states, CkptState.STAGED)
        report.stall_s = time.perf_counter() - t0
        self.events("stage.done", {"id": ckpt_id})
        handle = SaveHandle(report, self._worker.submit(self._background, report, items, None))
        self._inflight = handle
        return handle

    def commit_local_files(self, step: int, ckpt_id: str, names: list[str]) -> SaveHandle:
        """For writers that already put the files in the local cache (the DCP writer)."""
        report = SaveReport(id=ckpt_id, step=step, action="saved")
        advance(report.states, CkptState.STAGED)
        handle = SaveHandle(report, self._worker.submit(self._background, report, None, names))
        self._inflight = handle
        return handle

    def local_data_dir(self, ckpt_id: str) -> Path:
        return self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id))

    # --- the background side -----------------------------------------------------------------
    def _catalog(self, report: SaveReport, seq: int, save_uuid: str) -> None:
        self.tiers.write_catalog(report.id, {
            "id": report.id, "step": report.step, "seq": seq, "save_uuid": save_uuid,
            "states": report.states, "errors": report.errors, "hash": report.hash,
            "bytes": report.total_bytes})

    def _next_seq(self) -> int:
        # Not fsynced: after a crash the catalog (fsynced below) still holds the seq used,
        # and a repeated number only shifts which checkpoint the archive takes.
        p = self.tiers.root / "seq"
        seq = int(p.read_text()) + 1 if p.exists() else 1
        write_durable(p, str(seq).encode(), sync=False)
        return seq

    def _persist(self, ckpt_id: str, items: list[StagedItem]) -> list[ItemEntry]:
        """Write each item to local NVMe while another thread hashes it (both drop the GIL)."""
        out = []
        data_dir = self.local_data_dir(ckpt_id)
        data_dir.mkdir(parents=True, exist_ok=True)
        algo, chunk = self.cfg.hash_algo, self.cfg.chunk_size
        written = []
        for it in items:
            hashes = self._parts.submit(chunk_hashes, it.view, chunk, algo)
            tmp = data_dir / f".{it.name}.tmp"
            with open(tmp, "wb", buffering=0) as f:
                for off in range(0, len(it.view), 64 << 20):
                    f.write(it.view[off:off + (64 << 20)])
            written.append((tmp, data_dir / it.name))
            ch = hashes.result()
            out.append(ItemEntry(it.name, len(it.view), ch, combine(ch, algo), it.meta))
            self.events("local.item", {"id": ckpt_id, "item": it.name})
        # One fsync pass after all writes (as `dd conv=fsync`): the kernel has been writing
        # back meanwhile, and the manifest that makes these files count comes only after it.
        for tmp, dest in written:
            if self.cfg.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            tmp.replace(dest)
        return out

    def _hash_files(self, ckpt_id: str, names: list[str]) -> list[ItemEntry]:
        data_dir = self.local_data_dir(ckpt_id)
        out = []
        for name in sorted(names):
            data = (data_dir / name).read_bytes()
            ch = chunk_hashes(data, self.cfg.chunk_size, self.cfg.hash_algo)
            out.append(ItemEntry(name, len(data), ch, combine(ch, self.cfg.hash_algo), {}))
        return out

    def _background(self, report: SaveReport, items: list[StagedItem] | None,
                    names: list[str] | None) -> None:
        with self.tiers.lease(report.id):
            save_uuid = uuid.uuid4().hex
            seq = self._next_seq()
            self._catalog(report, seq, save_uuid)
            entries = self._persist(report.id, items) if items is not None else \
                self._hash_files(report.id, names or [])
            if self.cfg.fsync:
                # The renames above (and the new checkpoint directories) must be on disk before
                # the manifest that makes them count: otherwise a power loss can leave a
                # committed local manifest naming files that are gone.
                fsync_dirs(self.local_data_dir(report.id), self.tiers.local.root)
            manifest = Manifest.new(id=report.id, step=report.step, save_uuid=save_uuid,
                                    algo=self.cfg.hash_algo, chunk_size=self.cfg.chunk_size,
                                    items=entries, created_at=report.states["staged"])
            report.hash, report.total_bytes = manifest.hash, manifest.total_bytes
            advance(report.states, CkptState.LOCAL)
            commit_manifest(self.tiers.local, self.tiers, manifest.for_tier("local",
                                                                            report.states))
            _set_latest(self.tiers.local, self.tiers, manifest)
            self._catalog(report, seq, save_uuid)
            self.events("local.commit", {"id": report.id})
            self._push_remote(manifest, report, seq)
            self.events("save.done", {"id": report.id})

    def _push_remote(self, manifest: Manifest, report: SaveReport, seq: int) -> None:
        tiers, states = self.tiers, report.states
        journal = tiers.read_journal(manifest.id)
        stats = report.stats

        def push(store: ObjectStore, state_time: dict[str, float]) -> str | None:
            try:
                self.uploader.upload_checkpoint(store, manifest, state_time, stats, journal)
                _set_latest(store, tiers, manifest)
                return None
            except CheckpointError as err:
                return str(err)

        save = lambda: self._catalog(report, seq, manifest.save_uuid)  # noqa: E731
        if "region" not in states:
            err = push(tiers.region, {**states, "region": time.time()})
            if err:
                report.errors[tiers.region.name] = err
                save()
                return
            advance(states, CkptState.REGION)
            report.errors.pop(tiers.region.name, None)
            save()
        if tiers.replicas and "replicated" not in states:
            futs = {r.name: self._tierpool.submit(push, r, {**states, "replicated": time.time()})
                    for r in tiers.replicas}
            errs = {n: e for n, f in futs.items() if (e := f.result())}
            report.errors.update(errs)
            for n in futs:
                if n not in errs:
                    report.errors.pop(n, None)
            if errs:
                save()
                return
            advance(states, CkptState.REPLICATED)
            save()
        if self._archive_due(seq) and "archived" not in states:
            err = push(tiers.archive,  # type: ignore[arg-type]  # _archive_due checked it
                       {**states, "archived": time.time()})
            if err:
                report.errors[tiers.archive.name] = err
                save()
                return
            advance(states, CkptState.ARCHIVED)
            save()
        tiers.drop_journal(manifest.id)

    def _archive_due(self, seq: int) -> bool:
        every = self.cfg.retention.archive_every
        return self.tiers.archive is not None and every > 0 and seq % every == 0

    # --- restart ---------------------------------------------------------------------------
    def resume(self) -> list[SaveReport]:
        """Finish what a killed saver left: uploads resume from the journal, never restart.

        A checkpoint whose local manifest was not committed never existed: its partial files
        are removed. One with a local manifest is pushed on to the tiers it has not reached.
        """
        out = []
        for ckpt_id in self.tiers.catalog_ids():
            entry = self.tiers.read_catalog(ckpt_id) or {}
            states = entry.get("states", {})
            try:
                local = self.tiers.read_manifest(self.tiers.local, ckpt_id)
            except ManifestInvalid as err:  # a damaged local copy is set aside, never pushed
                self.events("resume.quarantine", {"id": ckpt_id, "error": str(err),
                                                  "to": str(self.tiers.quarantine(ckpt_id))})
                local = None
            with self.tiers.lease(ckpt_id):
                if local is None or local.save_uuid != entry.get("save_uuid"):
                    if "local" not in states:
                        with contextlib.suppress(FileNotFoundError):
                            shutil.rmtree(self.local_data_dir(ckpt_id))
                        self.tiers.catalog_path(ckpt_id).unlink()
                        self.tiers.drop_journal(ckpt_id)
                        self.events("resume.discard", {"id": ckpt_id})
                    continue
                if "local" not in states:  # killed between the local commit and the catalog
                    states["local"] = local.states.get("local", time.time())
                    _set_latest(self.tiers.local, self.tiers, local)
                want_done = "replicated" if self.tiers.replicas else "region"
                due = self._archive_due(entry.get("seq", 0))
                if want_done in states and (not due or "archived" in states):
                    continue
                report = SaveReport(id=ckpt_id, step=entry["step"], action="resumed",
                                    states=dict(states), hash=local.hash,
                                    total_bytes=local.total_bytes)
                self.events("resume.start", {"id": ckpt_id})
                self._push_remote(local, report, entry.get("seq", 0))
                out.append(report)
        return out

