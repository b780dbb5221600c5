"""Adopt a checkpoint written by torch's own `FileSystemWriter` (`dcp.save(sd, checkpoint_id=
DIR)`): copy its files into the local cache (hashing while copying, one chunk in memory),
commit them and push them through the tiers, so `TieredStorageReader` serves it like any
checkpoint saved through the tiers, without a re-save from the training job."""

from __future__ import annotations

import os
from pathlib import Path

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.hashing import combine, copy_and_hash
from rackscale.checkpoint.manifest import ItemEntry, ckpt_id_for
from rackscale.checkpoint.objectstore import fsync_dirs
from rackscale.checkpoint.saver import CheckpointManager, SaveReport
from rackscale.checkpoint.tiers import Tiers


def dcp_files(src: Path) -> list[str]:
    """The files of a FileSystemWriter checkpoint: `.metadata` and the rank files."""
    if not src.is_dir():
        raise CheckpointError(f"{src} is not a directory; give the directory that torch's "
                              f"FileSystemWriter wrote (it holds .metadata and *.distcp)")
    if not (src / ".metadata").is_file():
        raise CheckpointError(f"{src} has no .metadata: not a finished checkpoint of torch's "
                              f"FileSystemWriter (a save killed before it finished has none)")
    return sorted(n for n in os.listdir(src) if (src / n).is_file()
                  and (n == ".metadata" or not n.startswith(".")) and not n.endswith(".tmp"))


def import_dcp(cfg: TiersConfig | Tiers, src: str | os.PathLike[str], step: int,
               ckpt_id: str | None = None) -> SaveReport:
    src = Path(src)
    names = dcp_files(src)
    ckpt_id = ckpt_id or ckpt_id_for(step)
    with CheckpointManager(cfg) as mgr:
        mgr.check_new_id(ckpt_id)
        tiers, algo, chunk = mgr.tiers, mgr.cfg.hash_algo, mgr.cfg.chunk_size
        data_dir = mgr.local_data_dir(ckpt_id)
        data_dir.mkdir(parents=True, exist_ok=True)
        entries = []
        with tiers.lease(ckpt_id):  # a copy cut short is an orphan `resume()` removes
            for n in names:
                tmp = data_dir / f".{n}.import"
                size, ch = copy_and_hash(src / n, tmp, chunk, algo, sync=mgr.cfg.fsync)
                tmp.replace(data_dir / n)
                entries.append(ItemEntry(n, size, ch, combine(ch, algo), {}))
            if mgr.cfg.fsync:
                fsync_dirs(data_dir, tiers.local.root)
        return mgr.commit_files(step, ckpt_id, entries).wait()
