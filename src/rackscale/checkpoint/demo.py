"""The demo step: a small checkpoint saved through every tier of the local-directory default
and restored from a cold cache, printing states, tiers and hashes (real, on this machine)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rackscale.checkpoint.config import default_config
from rackscale.checkpoint.restore import Restorer, RestoreReport
from rackscale.checkpoint.saver import CheckpointManager, SaveReport
from rackscale.checkpoint.tiers import Tiers


@dataclass(frozen=True, slots=True, kw_only=True)
class DemoCheckpoint:
    """The demo's two saves, the cold restore, and whether the restored state is the saved
    one (every figure measured on this host)."""

    saves: list[SaveReport]
    restore: RestoreReport
    ok: bool

    def as_dict(self) -> dict[str, Any]:
        """The report's `checkpoint.json` evidence: `{saves, restore, ok}`."""
        return {"saves": [r.as_dict() for r in self.saves], "restore": self.restore.as_dict(),
                "ok": self.ok}


def demo_checkpoint(data_dir: Path, say: Callable[[str], None], seed: int = 7) -> DemoCheckpoint:
    # The same tiers `rackscale checkpoint ls` shows; the demo owns them and starts afresh
    # (manifests are write-once, so re-running must not meet its previous run's ids).
    cfg = default_config(data_dir)
    shutil.rmtree(Path(data_dir) / "checkpoints", ignore_errors=True)
    rng = np.random.default_rng(seed)
    state: dict[str, np.ndarray] = {
        "model.weight": rng.standard_normal((512, 1024), dtype=np.float32),
        "optimizer.step": np.array([1000], dtype=np.int64)}
    with CheckpointManager(cfg) as mgr:
        r1 = mgr.save(1000, state).wait(30)
        r2 = mgr.save(2000, state | {"optimizer.step": np.array([2000])}).wait(30)
    for r in (r1, r2):
        path = " -> ".join(f"{s} +{t - r.states['staged']:.3f}s" for s, t in r.states.items())
        say(f"saved {r.id}: stall {r.stall_s * 1e3:.1f} ms, {r.total_bytes / 2**20:.1f} MiB, "
            f"{cfg.hash_algo} {r.hash[:16]}; {path}  (measured)")
    tiers = Tiers(cfg)
    shutil.rmtree(tiers.local.root, ignore_errors=True)  # a fresh node: nothing cached
    got, rep = Restorer(Tiers(cfg)).load_state("latest")
    ok = np.array_equal(got["model.weight"], state["model.weight"])
    say(f"restored {rep.id} from a cold cache: served by {rep.tier}, hashes verified "
        f"{'OK' if ok else 'MISMATCH'}, {rep.seconds * 1e3:.0f} ms  (measured)")
    return DemoCheckpoint(saves=[r1, r2], restore=rep, ok=bool(ok))
