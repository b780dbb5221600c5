"""PyTorch DCP through the tiers: `dcp.save`, `dcp.async_save` and `dcp.load` (resharding).

The writer lets DCP's own file writer put each rank's shards straight into the local NVMe
cache directory of the checkpoint (no extra copy). DCP calls `finish` on the coordinator only,
after every rank wrote, and writes `.metadata` last; our `finish` then hashes the files,
commits the local manifest and pushes region, replicas and archive in the background (or
waits, `wait_for_tiers=True`). The reader restores read-through into the local cache and
hands the verified files to DCP's file reader, so a different world size reshards as usual.
"""

from __future__ import annotations

import os
from typing import Any

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

from rackscale.checkpoint.config import TiersConfig
from rackscale.checkpoint.manifest import ckpt_id_for
from rackscale.checkpoint.restore import Restorer, RestoreReport
from rackscale.checkpoint.saver import CheckpointManager, SaveReport
from rackscale.checkpoint.tiers import Tiers


class TieredStorageWriter(FileSystemWriter):
    def __init__(self, cfg: TiersConfig, step: int, *, ckpt_id: str | None = None,
                 wait_for_tiers: bool = True) -> None:
        self.tiers_cfg = cfg
        self.step = step
        self.ckpt_id = ckpt_id or ckpt_id_for(step)
        self.wait_for_tiers = wait_for_tiers
        self.manager: CheckpointManager | None = None
        self.report: SaveReport | None = None
        tiers = Tiers(cfg)
        path = tiers.local.path(tiers.layout.data_prefix(self.ckpt_id))
        path.mkdir(parents=True, exist_ok=True)
        super().__init__(path, sync_files=cfg.fsync, overwrite=True)

    def finish(self, metadata: Any, results: Any) -> None:
        super().finish(metadata, results)  # DCP's .metadata: written last, by the coordinator
        path = os.fspath(self.path)
        names = sorted(n for n in os.listdir(path) if os.path.isfile(os.path.join(path, n))
                       and not n.endswith((".tmp", ".partial")))
        self.manager = CheckpointManager(self.tiers_cfg)
        handle = self.manager.commit_local_files(self.step, self.ckpt_id, names)
        if self.wait_for_tiers:
            try:
                self.report = handle.wait()
            finally:
                self.manager.close()


class TieredStorageReader(FileSystemReader):
    def __init__(self, cfg: TiersConfig, ckpt_id: str = "latest") -> None:
        tiers = Tiers(cfg)
        self.restore_report: RestoreReport = Restorer(tiers).restore(ckpt_id)
        super().__init__(tiers.local.path(tiers.layout.data_prefix(self.restore_report.id)))
