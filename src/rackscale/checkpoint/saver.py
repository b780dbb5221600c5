"""Async save: stage to host memory, then persist, upload, replicate and archive in the back.

`CheckpointManager.save()` returns as soon as the state is in host memory (the training
stall); one background worker then writes the local NVMe copy and commits its manifest,
uploads to the region with parallel multipart parts, copies to the other regions in parallel,
archives every m-th checkpoint, and advances the checkpoint's state with a time at each step.
A save under an id that is already committed is refused before any byte is written; a tier
that fails in the background is recorded in the report and the catalog and logged.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.errors import (
    AlreadyCommitted,
    CheckpointError,
    ManifestInvalid,
    StoreAuthError,
    StoreUnreachable,
)
from rackscale.checkpoint.hashing import chunk_hashes, combine, hash_files
from rackscale.checkpoint.manifest import CkptState, ItemEntry, Manifest, advance, ckpt_id_for
from rackscale.checkpoint.multinode import PartCommit, SavePart, build_manifest
from rackscale.checkpoint.objectstore import ObjectStore, fsync_dirs, write_durable
from rackscale.checkpoint.staging import StagedItem, StagingPool
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import (
    Committer,
    EventHook,
    Uploader,
    UploadStats,
    WholeCommit,
    no_events,
)

log = logging.getLogger("rackscale.checkpoint")
DOWN = (StoreUnreachable, StoreAuthError)


@dataclass(slots=True)
class SaveReport:
    id: str
    step: int
    action: str  # "saved" | "waited" (back-pressure made the caller wait) | "skipped" | "resumed"
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

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"rpo_s": self.rpo_s}


class SaveHandle:
    def __init__(self, report: SaveReport, future: Future[None] | None = None,
                 region: threading.Event | None = None) -> None:
        self.report = report
        self._future = future
        # set once the region tier has the save (or has refused it): what a job needs to
        # go on; the other regions and the archive follow in the background
        self.region = region or threading.Event()
        if future is None:
            self.region.set()

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def wait(self, timeout: float | None = None) -> SaveReport:
        """Every tier's push done (or failed); raises what the push raised."""
        if self._future is not None:
            self._future.result(timeout)
        return self.report

    def wait_region(self, timeout: float | None = None) -> SaveReport:
        """The region tier's push done (or failed): the replicas' and the archive's may still
        run. Raises what the push raised when it ended before the region was reached."""
        self.region.wait(timeout)
        if self._future is not None and self._future.done():
            self._future.result()
        return self.report


@dataclass(slots=True)
class CommitJob:
    """What the background push of one save needs after its local commit."""

    manifest: Manifest  # the whole checkpoint, or this rank's share of it
    seq: int
    committer: Committer
    tag: str = ""
    part: SavePart | None = None
    peer_errors: dict[str, str] = field(default_factory=dict)  # tier -> another rank's error
    wait_s: float = 0.0  # how long a coordinator waits for the other ranks' parts


def hash_entries(data_dir: Path, names: list[str], chunk_size: int, algo: str,
                 pool: ThreadPoolExecutor | None = None) -> list[ItemEntry]:
    """Item entries of files already in `data_dir`, hashed streaming and in parallel."""
    names = sorted(names)
    got = hash_files([data_dir / n for n in names], chunk_size, algo, pool)
    return [ItemEntry(n, size, ch, combine(ch, algo), {})
            for n, (size, ch) in zip(names, got, strict=True)]


def _committed_here(entry: dict[str, Any]) -> bool:
    """Whether a catalog entry of this node says the checkpoint exists as a whole.

    A single-process save exists once it is committed locally. Rank 0's part of a multi-rank
    save says so only once rank 0 committed the manifest in a remote tier: before that the
    checkpoint is in no tier as a whole (the other ranks' parts are on their own nodes, and
    a node lost with its part never delivers it), so a retry of the same step may supersede
    the attempt (its new save uuid makes the old parts never count)."""
    states = entry.get("states", {})
    part = entry.get("part")
    if part is None:
        return "local" in states
    return part.get("rank") == 0 and any(s in states for s in ("region", "replicated",
                                                                   "archived"))


# ioprio_set(2) has no wrapper in Python's os module: its number on the architectures that
# have it under one name (the generic table covers arm64 and riscv64).
_IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "riscv64": 30, "ppc64le": 273, "s390x": 282}
_IOPRIO_CLASS_IDLE, _IOPRIO_WHO_PROCESS = 3, 1


def _io_idle(tid: int) -> None:
    number = _IOPRIO_SET.get(os.uname().machine) if sys.platform == "linux" else None
    if number is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(number, _IOPRIO_WHO_PROCESS, tid, _IOPRIO_CLASS_IDLE << 13) != 0:
        err = ctypes.get_errno()
        log.debug("cannot set the idle I/O class of thread %s: %s", tid, os.strerror(err))


def lower_priority(nice: int, io: str = "normal") -> Callable[[], None]:
    """A thread-pool initializer: the thread runs `nice` steps nicer than the process's main
    thread (absolute, so a thread started by an already nicer thread is not lowered twice),
    and in the idle I/O class when `io` is "idle". On Linux both are per thread; elsewhere
    (or where refused) the thread keeps its own."""
    def init() -> None:
        tid = threading.get_native_id()
        if io == "idle":
            _io_idle(tid)  # not fatal either way: the push only competes harder
        if nice <= 0 or not hasattr(os, "setpriority"):
            return
        try:
            target = min(19, os.getpriority(os.PRIO_PROCESS, os.getpid()) + nice)
            if os.getpriority(os.PRIO_PROCESS, tid) < target:
                os.setpriority(os.PRIO_PROCESS, tid, target)
        except OSError as err:  # not fatal: the push only competes harder for the CPU
            log.debug("cannot lower the priority of thread %s: %s", tid, err)
    return init


class CheckpointManager:
    def __init__(self, cfg: TiersConfig | Tiers, *, events: EventHook = no_events,
                 progress: Callable[[int], None] | None = None) -> None:
        self.tiers = cfg if isinstance(cfg, Tiers) else Tiers(cfg)
        self.cfg = self.tiers.cfg
        self.events = events
        # Everything after a save has returned runs at a lower priority (`background_nice`,
        # `background_io`);
        # the threads that hash a DCP writer's files before it returns do not.
        nicer = lower_priority(self.cfg.background_nice, self.cfg.background_io)
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="ckpt-save", initializer=nicer)
        self._parts = ThreadPoolExecutor(self.cfg.upload_parallelism,
                                         thread_name_prefix="ckpt-part", initializer=nicer)
        self._tierpool = ThreadPoolExecutor(max(1, len(self.tiers.remote)),
                                            thread_name_prefix="ckpt-tier", initializer=nicer)
        self._hash = ThreadPoolExecutor(max(1, min(self.cfg.upload_parallelism,
                                                   os.cpu_count() or 1)),
                                        thread_name_prefix="ckpt-hash")
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
            self.shutdown(wait=True)

    def shutdown(self, *, wait: bool) -> None:
        for pool in (self._worker, self._tierpool, self._parts, self._hash):
            pool.shutdown(wait=wait)

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The threads on which writers hash their files before the save returns (at the
        caller's priority; submit to it only from such a thread: new threads inherit the
        priority of the thread that starts them)."""
        return self._hash

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- refusing a re-save before anything is written ---------------------------------------
    def check_new_id(self, ckpt_id: str, *, remote: bool = True) -> None:
        """Raise `AlreadyCommitted` if `ckpt_id` is committed here or (when reachable, and
        `remote`) in the region: a save must never open a committed checkpoint's files."""
        t = self.tiers
        why = None
        try:
            here = t.read_manifest(t.local, ckpt_id) is not None
        except ManifestInvalid as err:  # damaged, but committed: `resume()` sets it aside
            here, why = True, f"its local manifest is damaged ({err}); run resume() first"
        if here:
            why = why or f"its manifest is committed in {t.local.root}"
        else:
            for cid, tag in t.catalog_keys():
                entry = t.read_catalog(cid, tag) if cid == ckpt_id else None
                if entry and _committed_here(entry):
                    why = f"this node committed it (catalog {t.catalog_path(cid, tag)})"
                    break
        if why is None and remote:
            try:
                if t.region.head(t.layout.manifest(ckpt_id)) is not None:
                    why = f"region {t.region.name} holds its manifest"
            except DOWN:
                pass  # down: the local catalog above is what this node knows
        if why is not None:
            raise AlreadyCommitted.for_id(ckpt_id, why)

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
        # Local knowledge at once (cheap); the region is asked in the background, still
        # before the first byte of the new save is written.
        self.check_new_id(ckpt_id, remote=False)
        items = self.staging.stage(state)
        report = SaveReport(id=ckpt_id, step=step, action=action, waited_s=waited)
        advance(report.states, CkptState.STAGED)
        report.stall_s = time.perf_counter() - t0
        self.events("stage.done", {"id": ckpt_id})
        region = threading.Event()
        handle = SaveHandle(report, self._worker.submit(self._background, report, items,
                                                        region), region)
        self._inflight = handle
        return handle

    def commit_files(self, step: int, ckpt_id: str, entries: list[ItemEntry], *,
                     part: SavePart | None = None,
                     peer_errors: dict[str, str] | None = None) -> SaveHandle:
        """For writers that already put (and fsynced) the files in the local cache (the DCP
        writer, `import`): commit them locally now, push to the tiers in the background."""
        report = SaveReport(id=ckpt_id, step=step, action="saved")
        advance(report.states, CkptState.STAGED)
        with self.tiers.lease(ckpt_id):
            job = self._commit_local(report, entries, part)
        job.peer_errors = dict(peer_errors or {})
        job.wait_s = self.cfg.commit_timeout_s if part is not None and part.coordinator else 0
        region = threading.Event()
        handle = SaveHandle(report, self._worker.submit(self._push_job, report, job, region),
                            region)
        self._inflight = handle
        return handle

    def preupload(self, ckpt_id: str, save_uuid: str,
                  entries: list[ItemEntry]) -> Future[None]:
        """Rank 0 of a multi-rank save: send its data files while the other ranks send theirs
        (its part is committed later, with `.metadata`); the journal skips them then."""
        def run() -> None:
            journal = self.tiers.open_journal(ckpt_id, save_uuid)
            try:
                names, stats = [e.name for e in entries], UploadStats()
                # The region only: its rank waits for this, and a replica that hangs must
                # not make it wait (the replicas' data goes out with the commit's push).
                self._send_early(self.tiers.region, ckpt_id, names, stats, journal)
            finally:
                journal.close()
        fut = self._worker.submit(run)
        self._inflight = SaveHandle(SaveReport(id=ckpt_id, step=-1, action="preupload"), fut)
        return fut

    def _send_early(self, store: ObjectStore, ckpt_id: str, names: list[str],
                    stats: UploadStats, journal: Any) -> None:
        """Data ahead of its commit (objects count only once a manifest names them); a
        failure is only logged: the commit's own push sends them again and reports it."""
        try:
            self.uploader.upload_items(store, ckpt_id, names, stats, journal)
        except (CheckpointError, OSError) as err:
            log.warning("checkpoint %s: early upload to %s failed: %s", ckpt_id, store.name,
                        err)

    def local_data_dir(self, ckpt_id: str) -> Path:
        return self.tiers.local.path(self.tiers.layout.data_prefix(ckpt_id))

    # --- the background side -----------------------------------------------------------------
    def _catalog(self, report: SaveReport, job: CommitJob | None, seq: int, save_uuid: str,
                 part: SavePart | None = None, files: list[str] | None = None) -> None:
        tag = part.tag if part is not None else ""
        if job is not None:
            seq, save_uuid, part, tag = job.seq, job.manifest.save_uuid, job.part, job.tag
            files = [e.name for e in job.manifest.items] if part is not None else None
        entry = {"id": report.id, "step": report.step, "seq": seq, "save_uuid": save_uuid,
                 "states": report.states, "errors": report.errors, "hash": report.hash,
                 "bytes": report.total_bytes}
        if part is not None:
            # The files are named so that a rank that shares its node's directory with other
            # ranks discards only its own files if this save turns out never to have existed.
            entry |= {"part": part.as_dict(), "files": files or []}
        # The first entry of a save is synced (without it `resume()` would never learn of
        # the save); later ones replace it and follow commits that are durable themselves
        # (manifests, part records), from which `resume()` rebuilds what a power cut took
        # from the catalog. Each synced write costs two fsyncs on the save's critical path.
        path = self.tiers.catalog_path(report.id, tag)
        self.tiers.write_catalog(report.id, entry, tag, sync=job is None or not path.exists())

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

    def _background(self, report: SaveReport, items: list[StagedItem],
                    region: threading.Event) -> None:
        try:
            with self.tiers.lease(report.id):
                try:
                    self.check_new_id(report.id)
                except AlreadyCommitted as err:
                    report.errors["save"] = str(err)
                    raise
                job = self._commit_local(report, items, None)
                self._push_remote(report, job, region)
                self.events("save.done", {"id": report.id})
        finally:
            region.set()  # however it ended: a waiter for the region is never left waiting

    def _push_job(self, report: SaveReport, job: CommitJob, region: threading.Event) -> None:
        try:
            with self.tiers.lease(report.id):
                self._push_remote(report, job, region)
                self.events("save.done", {"id": report.id})
        finally:
            region.set()

    def _commit_local(self, report: SaveReport, payload: list[StagedItem] | list[ItemEntry],
                      part: SavePart | None) -> CommitJob:
        """Local NVMe copy durable, then its commit (manifest, or this rank's part record)."""
        save_uuid = part.save_uuid if part is not None else uuid.uuid4().hex
        tag = part.tag if part is not None else ""
        seq = self._next_seq()
        staged = [p for p in payload if isinstance(p, StagedItem)]
        if staged:
            # Before the first byte: a kill now leaves files `resume()` knows to remove. Files
            # a writer already put there (DCP) are swept as orphans if no commit follows.
            self._catalog(report, None, seq, save_uuid, part)
        entries = self._persist(report.id, staged) if staged else \
            [p for p in payload if isinstance(p, ItemEntry)]
        if self.cfg.fsync:
            # The renames above (and the new checkpoint directories) must be on disk before
            # the manifest that makes them count: otherwise a power loss can leave a
            # committed local manifest naming files that are gone.
            fsync_dirs(self.local_data_dir(report.id), self.tiers.local.root)
        created = part.created_at if part is not None else report.states["staged"]
        manifest = build_manifest(ckpt_id=report.id, step=report.step, save_uuid=save_uuid,
                                  algo=self.cfg.hash_algo, chunk_size=self.cfg.chunk_size,
                                  items=entries, created_at=created, job=self.tiers.job)
        report.hash, report.total_bytes = manifest.hash, manifest.total_bytes
        committer: Committer = PartCommit(self.tiers, part) if part is not None else \
            WholeCommit(self.tiers)
        advance(report.states, CkptState.LOCAL)
        committer.commit(self.tiers.local, manifest, report.states)
        job = CommitJob(manifest=manifest, seq=seq, committer=committer, tag=tag, part=part)
        self._full_known(report, job)
        self._catalog(report, job, seq, save_uuid)
        self.events("local.commit", {"id": report.id})
        return job

    @staticmethod
    def _full_known(report: SaveReport, job: CommitJob) -> None:
        full = getattr(job.committer, "full", None)
        if full is not None and job.part is not None and job.part.coordinator:
            report.hash, report.total_bytes = full.hash, full.total_bytes

    def _push_one(self, store: ObjectStore, job: CommitJob, states: dict[str, float],
                  stats: UploadStats, journal: Any) -> str | None:
        """Push to one tier; the error that keeps it from counting there, or None."""
        try:
            done = self.uploader.upload_checkpoint(store, job.manifest, states, stats, journal,
                                                   job.committer)
            if done or job.part is None or not job.part.coordinator:
                return None  # a non-coordinator rank is done once its part is in
            if store.name in job.peer_errors:
                return job.peer_errors[store.name]
            pc = job.committer
            if not isinstance(pc, PartCommit):
                raise CheckpointError(f"rank part of {job.manifest.id} without a part commit")
            if job.wait_s and pc.await_complete(store, job.manifest, states, job.wait_s):
                return None
            return (f"incomplete in {store.name}: the parts of ranks "
                    f"{pc.missing(store, job.manifest.id)} are not there yet; `resume()` on "
                    f"those ranks pushes them and commits the manifest")
        except CheckpointError as err:
            return str(err)

    def _push_remote(self, report: SaveReport, job: CommitJob,
                     region: threading.Event | None = None) -> None:
        tiers, stats = self.tiers, report.stats
        region = region or threading.Event()
        journal = tiers.open_journal(job.manifest.id, job.manifest.save_uuid, job.tag)
        try:
            finished = self._push_tiers(report, job, (journal, region), stats)
        finally:
            journal.close()
        self._full_known(report, job)
        self._catalog(report, job, job.seq, job.manifest.save_uuid)
        if finished:
            tiers.drop_journal(job.manifest.id, job.tag)

    def _failed(self, report: SaveReport, store: ObjectStore, err: str) -> None:
        report.errors[store.name] = err
        log.warning("checkpoint %s: tier %s failed in the background: %s (state stays %s; "
                    "`resume()` pushes it again)", report.id, store.name, err,
                    list(report.states)[-1])

    def _push_tiers(self, report: SaveReport, job: CommitJob,
                    journal_region: tuple[Any, threading.Event], stats: UploadStats) -> bool:
        """Region, then the other regions, then the archive. The region's commit is what a
        job waits for (`region` is set then): a replica that hangs delays only its own
        commit, never the region's (its early data upload is waited for after it)."""
        tiers, states = self.tiers, report.states
        journal, region = journal_region

        def save() -> None:
            self._catalog(report, job, job.seq, job.manifest.save_uuid)

        early = []
        if "region" not in states and "replicated" not in states:
            # The replicas' data goes out beside the region's; their manifests still follow
            # the region commit (the state order), below.
            names = [it.name for it in job.manifest.items]
            early = [self._tierpool.submit(self._send_early, r, job.manifest.id, names, stats,
                                           journal) for r in tiers.replicas]
        if "region" not in states:
            try:
                err = self._push_one(tiers.region, job, {**states, "region": time.time()},
                                     stats, journal)
                if err:
                    self._failed(report, tiers.region, err)
                else:
                    advance(states, CkptState.REGION)
                    report.errors.pop(tiers.region.name, None)
                save()
                region.set()
            finally:  # the journal closes after this: nothing may still write to it
                for f in early:
                    f.result()  # a failure was logged; the replica's push sends it again
            if err:
                return False
        region.set()
        if tiers.replicas and "replicated" not in states:
            futs = {r.name: (r, self._tierpool.submit(
                self._push_one, r, job, {**states, "replicated": time.time()}, stats, journal))
                for r in tiers.replicas}
            errs = {n: (r, e) for n, (r, f) in futs.items() if (e := f.result())}
            for r, e in errs.values():
                self._failed(report, r, e)
            for n in futs:
                if n not in errs:
                    report.errors.pop(n, None)
            if errs:
                save()
                return False
            advance(states, CkptState.REPLICATED)
            save()
        if self._archive_due(job.seq) and "archived" not in states:
            archive: ObjectStore = tiers.archive  # type: ignore[assignment]  # _archive_due
            err = self._push_one(archive, job, {**states, "archived": time.time()}, stats,
                                 journal)
            if err:
                self._failed(report, archive, err)
                save()
                return False
            advance(states, CkptState.ARCHIVED)
            save()
        return True

    def _archive_due(self, seq: int) -> bool:
        every = self.cfg.retention.archive_every
        return self.tiers.archive is not None and every > 0 and seq % every == 0

    # --- restart ---------------------------------------------------------------------------
    def resume(self) -> list[SaveReport]:
        """Finish what a killed saver left: uploads resume from the journal, never restart.

        A checkpoint whose local commit did not happen never existed: its partial files are
        removed (never files a committed manifest names), and so are data directories of
        killed saves that left no record at all. One with a local commit is pushed on to the
        tiers it has not reached.
        """
        from rackscale.checkpoint.resume import resume_all

        return resume_all(self)
