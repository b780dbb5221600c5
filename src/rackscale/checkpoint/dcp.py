"""PyTorch DCP through the tiers: `dcp.save`, `dcp.async_save` and `dcp.load` (resharding).

The writer lets DCP's own file writer put each rank's shards straight into that rank's local
NVMe cache directory (no extra copy; every node has its own `local_dir`). Each rank then
hashes its own files (streamed, in parallel), commits them locally and pushes them to every
tier itself, in parallel with the other ranks. DCP gathers every rank's result on the
coordinator, which writes `.metadata` last and pushes it with its own files; a tier's
manifest is committed only when every rank's part is in that tier (`multinode.py`). One
process alone (world size 1) commits the whole checkpoint directly.

Before any byte is written (`set_up_storage_writer`, where an error reaches every rank) the
writer refuses an id that is already committed, so a restarted job that re-saves its resume
step cannot touch the checkpoint it resumed from. A `checkpoint_id` passed to `dcp.save` /
`dcp.load` beside these classes must name the same checkpoint (or be omitted).
The reader restores read-through into the local cache and hands the verified files to DCP's
file reader, so a different world size reshards as usual. With `local_cache: false` it restores
into a private directory of its own instead (every chunk from the remote tiers), removed once
DCP has read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import tempfile
import time
import uuid
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch.futures
from torch.distributed.checkpoint.filesystem import (
    FileSystemReader,
    FileSystemWriter,
    _StoragePrefix,
)
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.dcp_stream import HashingFileSystem
from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.hashing import combine
from rackscale.checkpoint.manifest import ItemEntry, ckpt_id_for
from rackscale.checkpoint.multinode import SavePart
from rackscale.checkpoint.restore import Restorer, RestoreReport
from rackscale.checkpoint.saver import CheckpointManager, SaveHandle, SaveReport, hash_entries
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import EventHook, no_events

# A result each rank adds to what DCP gathers on the coordinator (and that `finish` removes
# before DCP's metadata is written): how the rank's local commit and uploads went.
_NOTE = "__rackscale_rank_note__"
# Options of FileSystemWriter the tiers decide themselves.
_OWNED = ("path", "sync_files", "overwrite", "checkpoint_id")


@dataclasses.dataclass
class _RankPrefix(_StoragePrefix):
    """DCP's per-rank file prefix plus what every rank must share: the save's identity."""

    rank: int = 0
    world: int = 1
    save_uuid: str = ""
    created_at: float = 0.0


def _same_id(given: str | os.PathLike[str], ckpt_id: str) -> bool:
    return os.fspath(given).rstrip("/").rsplit("/", 1)[-1] == ckpt_id


class TieredStorageWriter(FileSystemWriter):
    def __init__(self, cfg: TiersConfig, step: int, *, ckpt_id: str | None = None,
                 wait_for_tiers: bool = True, events: EventHook = no_events,
                 **fs_options: Any) -> None:
        """`fs_options` go to FileSystemWriter (single_file_per_rank, thread_count, ...);
        `events` receives the save's progress events (as `CheckpointManager`'s)."""
        bad = [k for k in fs_options if k in _OWNED]
        if bad:
            raise CheckpointError(f"TieredStorageWriter: {bad} are set by the tiers config "
                                  f"(local_dir, fsync) and the checkpoint id; remove them")
        self.tiers_cfg = cfg
        self.step = step
        self.ckpt_id = ckpt_id or ckpt_id_for(step)
        self.wait_for_tiers = wait_for_tiers
        self.events = events
        self.manager: CheckpointManager | None = None
        self.report: SaveReport | None = None
        self.handle: SaveHandle | None = None
        self.tiers = Tiers(cfg)
        self._lease_fd: int | None = None
        self._entries: list[ItemEntry] = []
        self._pre: Future[None] | None = None
        path = self.tiers.local.path(self.tiers.layout.data_prefix(self.ckpt_id))
        super().__init__(path, sync_files=cfg.fsync, overwrite=True, **fs_options)
        self.fs: HashingFileSystem = HashingFileSystem(cfg.chunk_size, cfg.hash_algo)

    # --- DCP's protocol -----------------------------------------------------------------------
    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None and not _same_id(checkpoint_id, self.ckpt_id):
            raise CheckpointError(
                f"checkpoint_id={os.fspath(checkpoint_id)!r} was passed beside "
                f"TieredStorageWriter, which saves checkpoint {self.ckpt_id!r} under its "
                f"tiers config: omit checkpoint_id (or pass {self.ckpt_id!r}), and choose "
                f"the id with TieredStorageWriter(cfg, step, ckpt_id=...)")
        super().reset(None)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        self.is_coordinator = is_coordinator
        self._take_lease()
        self.manager = CheckpointManager(self.tiers, events=self.events)
        try:
            # Raised here, DCP reports it on every rank, and no rank has written anything.
            self.manager.check_new_id(self.ckpt_id, remote=is_coordinator)
        except CheckpointError:
            self._close()
            raise

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        plans = super().prepare_global_plan(plans)
        save_uuid, now = uuid.uuid4().hex, time.time()
        return [dataclasses.replace(p, storage_data=_RankPrefix(
            p.storage_data.prefix, rank=i, world=len(plans), save_uuid=save_uuid,
            created_at=now)) for i, p in enumerate(plans)]

    def write_data(self, plan: SavePlan,
                   planner: SavePlanner) -> torch.futures.Future[list[WriteResult]]:
        info: _RankPrefix = plan.storage_data
        self._part = SavePart(rank=info.rank, world=info.world, save_uuid=info.save_uuid,
                              created_at=info.created_at)
        self._drop_stale(info)
        mgr = self._mgr()
        self.fs.pool = mgr.pool  # hash each file while DCP writes it
        try:
            results = super().write_data(plan, planner).value()
        finally:
            self.fs.pool = None
        self._entries = self._hashed_entries(sorted({r.storage_data.relative_path
                                                     for r in results}))
        note: dict[str, Any] = {"rank": info.rank, "errors": {}}
        if info.world > 1 and info.rank != 0:
            self.handle = mgr.commit_files(self.step, self.ckpt_id, self._entries,
                                           part=self._part)
            if self.wait_for_tiers:
                self.report = self._wait(self.handle)
                note["errors"] = self.report.errors
            else:
                self._release_when_done(self.handle)
        elif info.world > 1:
            self._pre = mgr.preupload(self.ckpt_id, info.save_uuid, self._entries)
            if self.wait_for_tiers:
                self._pre.result()
        fut: torch.futures.Future[list[WriteResult]] = torch.futures.Future()
        fut.set_result([*results, WriteResult(index=MetadataIndex(f"{_NOTE}{info.rank}"),
                                              size_in_bytes=0, storage_data=note)])
        return fut

    def finish(self, metadata: Any, results: list[list[WriteResult]]) -> None:
        notes = [r.storage_data for rl in results for r in rl
                 if r.index.fqn.startswith(_NOTE)]
        clean = [[r for r in rl if not r.index.fqn.startswith(_NOTE)] for rl in results]
        super().finish(metadata, clean)  # DCP's .metadata: written last, by the coordinator
        mgr = self._mgr()
        # A new list: the early upload of rank 0's data may still be reading the old one.
        self._entries = self._entries + hash_entries(
            Path(self.path), [".metadata"], self.tiers_cfg.chunk_size, self.tiers_cfg.hash_algo)
        peer: dict[str, str] = {}
        for n in notes:
            for tier, err in n["errors"].items():
                peer.setdefault(tier, f"rank {n['rank']}: {err}")
        part = self._part if self._part.world > 1 else None
        self.handle = mgr.commit_files(self.step, self.ckpt_id, self._entries, part=part,
                                       peer_errors=peer)
        if self.wait_for_tiers:
            self.report = self._wait(self.handle)
        else:
            self._release_when_done(self.handle)

    # --- helpers ------------------------------------------------------------------------------
    def _mgr(self) -> CheckpointManager:
        if self.manager is None:
            raise CheckpointError("TieredStorageWriter used outside dcp.save/async_save")
        return self.manager

    def _hashed_entries(self, names: list[str]) -> list[ItemEntry]:
        """Entries of this rank's files from the hashes taken while they were written; a file
        whose stream was not plainly appended to is hashed again from disk."""
        algo, out, again = self.tiers_cfg.hash_algo, {}, []
        for n in names:
            size = os.stat(Path(self.path) / n).st_size
            ch = self.fs.take(n, size)
            if ch is None:
                again.append(n)
            else:
                out[n] = ItemEntry(n, size, ch, combine(ch, algo), {})
        if again:
            for e in hash_entries(Path(self.path), again, self.tiers_cfg.chunk_size, algo,
                                  self._mgr().pool):
                out[e.name] = e
        return [out[n] for n in names]

    def _drop_stale(self, info: _RankPrefix) -> None:
        """Files an earlier, uncommitted attempt left under this rank's name or the name of a
        rank that no longer exists (a retry at a smaller world size): never part of this
        save. Other live ranks' names are theirs to overwrite (they may share the dir)."""
        own = f"__{info.rank}_"
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.path):
                rank = name[2:].split("_", 1)[0] if name.startswith("__") else ""
                stale = name.startswith(own) or (rank.isdigit() and int(rank) >= info.world)
                if stale or (info.rank == 0 and name == ".metadata"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(os.path.join(self.path, name))

    def _wait(self, handle: SaveHandle) -> SaveReport:
        """Until the region tier has this rank's save (committed or refused): the training
        goes on then. The other regions and the archive follow off the training path, each
        bounded by its store's timeouts; the lease and the manager go when they are done."""
        try:
            report = handle.wait_region()
        except BaseException:
            self._close()
            raise
        self._release_when_done(handle)
        return report

    def _release_when_done(self, handle: SaveHandle) -> None:
        fut = handle._future
        if fut is None:
            self._close()
            return
        mgr = self.manager

        def done(_f: Future[None]) -> None:
            self._release_lease()
            if mgr is not None:
                mgr.shutdown(wait=False)  # from the worker's own thread: must not join it

        fut.add_done_callback(done)

    def _close(self) -> None:
        try:
            if self.manager is not None:
                self.manager.close()
        finally:
            self._release_lease()

    def _take_lease(self) -> None:
        # Held from the plan to the last upload: gc and resume's orphan sweep keep off.
        if self._lease_fd is None:
            fd = os.open(self.tiers.lease_path(self.ckpt_id), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)
            self._lease_fd = fd

    def _release_lease(self) -> None:
        fd, self._lease_fd = self._lease_fd, None
        if fd is not None:
            os.close(fd)


UNCACHED = "uncached"  # below local_dir: the private restore directories of `local_cache: false`


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def uncached_dir(cfg: TiersConfig) -> Path:
    """A new private directory on the node for one restore that must not read the node's
    cache (`local_cache: false`); those a dead process left behind are removed first. Named
    by the pid so that the ranks of one node never share one."""
    base = Path(cfg.local_dir) / UNCACHED
    base.mkdir(parents=True, exist_ok=True)
    for d in base.iterdir():
        pid = d.name.partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(d, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=base))


class TieredStorageReader(FileSystemReader):
    def __init__(self, cfg: TiersConfig, ckpt_id: str = "latest") -> None:
        # Without a local cache the read-through restore goes into an empty directory of its
        # own: every chunk comes from the remote tiers, whatever this node's cache holds.
        self._scratch = None if cfg.local_cache else uncached_dir(cfg)
        if self._scratch is not None:
            cfg = cfg.model_copy(update={"local_dir": str(self._scratch)})
        tiers = Tiers(cfg)
        try:
            self.restore_report: RestoreReport = Restorer(tiers).restore(ckpt_id)
        except BaseException:
            self._drop_scratch()
            raise
        super().__init__(tiers.local.path(tiers.layout.data_prefix(self.restore_report.id)))

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> torch.futures.Future[None]:
        # DCP's file reader reads every byte before it returns: the private copy of an
        # uncached restore is no longer needed then.
        try:
            return super().read_data(plan, planner)
        finally:
            self._drop_scratch()

    def _drop_scratch(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        rid = self.restore_report.id
        if checkpoint_id is not None and not _same_id(checkpoint_id, rid):
            raise CheckpointError(
                f"checkpoint_id={os.fspath(checkpoint_id)!r} was passed beside "
                f"TieredStorageReader, which reads the verified checkpoint {rid!r}: omit "
                f"checkpoint_id (or pass {rid!r}), and choose the checkpoint with "
                f"TieredStorageReader(cfg, ckpt_id)")
        super().reset(None)
