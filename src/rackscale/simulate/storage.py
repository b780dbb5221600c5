"""Storage in the simulator: where the latest good checkpoint is after each failure, and what
reading it back costs.

`StorageTimes` are the job's checkpoint figures in seconds: the blocking stall of a save, the
time from the save call until the checkpoint is durable on local NVMe / in the region / in the
other regions, and the restore time from each tier. They come from a measured storage profile
(`rackscale checkpoint profile`), scaled to the job's checkpoint share per node with the
profile's fitted model `t(S) = latency + S / bandwidth` (`scale_fits`): every node saves and
restores its own share in parallel, so the job's times are one node's times at its share (the
object store is assumed to serve all nodes at the measured per-client rate).

The rules (`cause_arrays`), per failure cause:
- a crash that leaves the node (scope `none`: software, NCCL timeouts) restores from the local
  cache on the surviving nodes when there is one, else from the region;
- a fault that takes a tray or a domain out restores from the region: the replacement node has
  no cache, and the job waits for its slowest rank;
- a region loss (power, network; `region_loss_per_year`) restarts the job in another region
  from the replicated copy; without replication the job waits `region_outage_h` for the region
  to come back and restores from it there;
- a checkpoint is good for a cause only once it is durable in the tier that cause restores
  from: a failure earlier than that after the save rolls back one more checkpoint (the saver's
  back-pressure lets at most one save be in flight, so one is the most there can be). The time
  a checkpoint is exposed this way is what the region loss costs beyond the interval: its RPO.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackscale.simulate.models import Cause

HOURS_PER_YEAR = 8766.0
# Bounds past any real store (a value past them is a typo or a broken profile, and would
# overflow the simulator's sums): a save or restore of 30 days, a region down for a year,
# a region lost every day.
MAX_STORAGE_S = 30 * 86_400.0
NonNeg = Annotated[float, Field(ge=0, le=MAX_STORAGE_S)]
MAX_OUTAGE_H = HOURS_PER_YEAR
MAX_REGION_LOSS_PER_YEAR = 365.0


class StorageTimes(BaseModel):
    """The job's checkpoint figures, seconds (measured on a profile, then scaled)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    save_stall_s: NonNeg
    durable_local_s: NonNeg
    durable_region_s: NonNeg
    durable_replicated_s: NonNeg | None = None
    restore_local_s: NonNeg
    restore_region_s: NonNeg
    restore_replica_s: NonNeg | None = None
    restore_archive_s: NonNeg | None = None
    local_cache: bool = True
    replication: bool = True
    region_loss_per_year: Annotated[float, Field(ge=0, le=MAX_REGION_LOSS_PER_YEAR)] = 0.0
    region_outage_h: Annotated[float, Field(gt=0, le=MAX_OUTAGE_H)] = 24.0
    shard_bytes: Annotated[int, Field(gt=0)] = 1
    source: str = "storage profile"

    @model_validator(mode="after")
    def _replica(self) -> StorageTimes:
        if self.replication and self.region_loss_per_year > 0 and (
                self.durable_replicated_s is None or self.restore_replica_s is None):
            raise ValueError("a region loss with replication needs the other region's figures "
                             "(durable_replicated_s, restore_replica_s): measure a profile on "
                             "tiers with a replica, or simulate without replication")
        return self

    @property
    def last_durable_s(self) -> float:
        """When the saver's background work for one save is over (what the next one waits for)."""
        rep = self.durable_replicated_s if self.replication else None
        return max(self.durable_region_s, rep or 0.0)

    def blocking_s(self, interval_s: float) -> float:
        """The stall, plus the wait when the previous save is still in flight at the next call
        (back-pressure `wait`): a save is called `interval + stall` after the previous one."""
        return self.save_stall_s + max(0.0, self.last_durable_s - interval_s - self.save_stall_s)

    def rpo_region_loss_s(self, interval_s: float) -> float:
        """Worst work lost to a region loss: a whole interval and blocking write, plus the time
        the newest checkpoint is not yet in the other region."""
        if not self.replication or self.durable_replicated_s is None:
            return interval_s + self.blocking_s(interval_s) + max(
                0.0, self.durable_region_s - self.save_stall_s)
        return interval_s + self.blocking_s(interval_s) + max(
            0.0, self.durable_replicated_s - self.save_stall_s)


def at_size(fit: dict[str, float], size: float) -> float:
    bw = fit["bandwidth_Bps"]
    return fit["latency_s"] + (size / bw if bw and math.isfinite(bw) else 0.0)


def scale_fits(fits: dict[str, dict[str, float]], shard_bytes: int, *,
               source: str = "storage profile", **rules: Any) -> StorageTimes:
    """StorageTimes of a job whose nodes each save `shard_bytes`, from a profile's fits;
    `rules` are StorageTimes' switches (local_cache, replication, region_loss_per_year,
    region_outage_h)."""
    def get(key: str) -> float | None:
        return at_size(fits[key], shard_bytes) if key in fits else None

    for key in ("stall", "local", "region", "restore.local", "restore.region"):
        if key not in fits:
            raise ValueError(f"the storage profile has no {key!r} figure")
    # The saver reaches the tiers in order (local, region, the other regions): fits of figures
    # measured on one disk can cross by noise, the order cannot.
    local = get("local") or 0.0
    region = max(get("region") or 0.0, local)
    rep = get("replicated")
    return StorageTimes(
        save_stall_s=get("stall"), durable_local_s=local, durable_region_s=region,
        durable_replicated_s=None if rep is None else max(rep, region),
        restore_local_s=get("restore.local"),
        restore_region_s=get("restore.region"), restore_replica_s=get("restore.replica"),
        restore_archive_s=get("restore.archive"), shard_bytes=shard_bytes, source=source,
        **rules)


def cause_arrays(st: StorageTimes, scopes: np.ndarray, region_loss: np.ndarray,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per cause, hours: (restore time, extra downtime, how long after a save's commit its
    checkpoint is still not good for that cause). `scopes` indexes SCOPES (0 = none);
    `region_loss` marks the region-loss cause."""
    crash = scopes == 0
    local_ok = st.local_cache
    restore = np.where(crash & local_ok, st.restore_local_s, st.restore_region_s)
    durable = np.where(crash & local_ok, st.durable_local_s, st.durable_region_s)
    extra = np.zeros(scopes.size)
    if st.replication and st.restore_replica_s is not None:
        restore = np.where(region_loss, st.restore_replica_s, restore)
        durable = np.where(region_loss, st.durable_replicated_s or 0.0, durable)
    else:
        restore = np.where(region_loss, st.restore_region_s, restore)
        durable = np.where(region_loss, st.durable_region_s, durable)
        extra = np.where(region_loss, st.region_outage_h * 3600, 0.0)
    # The engine commits a checkpoint when its blocking stall ends; the durable times run
    # from the save call, a stall earlier.
    exposed = np.maximum(durable - st.save_stall_s, 0.0)
    return restore / 3600, extra / 3600, exposed / 3600


# A whole region lost (power, network): the simulator's own cause, at `region_loss_per_year`.
# Scope none: the job moves away, the region's hardware is not the job's to repair.
REGION_LOSS = Cause(name="region loss (power, network)", count=0, kind="region_loss",
                    scope="none", repair_h=0, detect_min=5)
