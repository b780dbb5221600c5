"""Multi-rank saves: every rank uploads its own files; a tier's manifest is committed only
once every rank's part is in that tier.

On real nodes each rank has its own local NVMe directory, so no single process can see, hash
or upload the whole checkpoint. Each rank therefore pushes its own files to every tier and
then writes a **part record** there (`<prefix>/<id>/parts/rank-NNNNN.json`: its items and
their hashes, the save's uuid and the world size). Whoever finds the set complete after
writing its record — every rank 0..world-1 with this save's uuid — builds the manifest from
the parts and commits it write-once; two ranks finishing together both commit the same
manifest, which the write-once commit accepts (same save uuid). This is the second phase of
a two-phase commit through the store: no manifest names a file that is not in the tier, and
a record left by an earlier attempt of the same id (another uuid, perhaps a larger world)
never counts, so the stale files of a rank that no longer exists never enter a manifest.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from rackscale.checkpoint.errors import CheckpointError, ObjectMissing
from rackscale.checkpoint.manifest import ItemEntry, Manifest
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.tiers import Tiers
from rackscale.checkpoint.upload import commit_manifest, set_latest


def build_manifest(*, ckpt_id: str, step: int, save_uuid: str, algo: str, chunk_size: int,
                   items: list[ItemEntry], created_at: float, job: str | None) -> Manifest:
    """A new manifest, its items in name order (every rank builds the same one)."""
    return Manifest.new(id=ckpt_id, step=step, save_uuid=save_uuid, algo=algo,
                        chunk_size=chunk_size, items=sorted(items, key=lambda e: e.name),
                        created_at=created_at, job=job or "")


@dataclass(frozen=True, slots=True)
class SavePart:
    """This process's share of a multi-rank save (rank 0 also writes DCP's `.metadata`)."""

    rank: int
    world: int
    save_uuid: str
    created_at: float

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world:
            raise CheckpointError(f"rank {self.rank} outside world size {self.world}")

    @property
    def tag(self) -> str:
        """Catalog/journal suffix: ranks of one save may share a node's local directory."""
        return "" if self.rank == 0 else f"@r{self.rank}"

    @property
    def coordinator(self) -> bool:
        return self.rank == 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SavePart:
        return cls(rank=int(raw["rank"]), world=int(raw["world"]), save_uuid=raw["save_uuid"],
                   created_at=float(raw["created_at"]))


def parts_prefix(tiers: Tiers, ckpt_id: str) -> str:
    return f"{tiers.layout.ckpt_prefix(ckpt_id)}parts/"


def part_key(tiers: Tiers, ckpt_id: str, rank: int) -> str:
    return f"{parts_prefix(tiers, ckpt_id)}rank-{rank:05d}.json"


def read_part(tiers: Tiers, store: ObjectStore, ckpt_id: str,
              rank: int) -> dict[str, Any] | None:
    try:
        part: dict[str, Any] = json.loads(store.get(part_key(tiers, ckpt_id, rank)))
        return part
    except ObjectMissing:
        return None


class PartCommit:
    """The `Committer` of one rank: write its part record, commit the manifest if complete."""

    def __init__(self, tiers: Tiers, part: SavePart) -> None:
        self.tiers = tiers
        self.part = part
        self.full: Manifest | None = None  # the whole checkpoint, once complete somewhere

    def commit(self, store: ObjectStore, manifest: Manifest, states: dict[str, float]) -> bool:
        existing = self.tiers.read_manifest(store, manifest.id)
        if existing is not None:
            if existing.save_uuid != self.part.save_uuid:
                raise CheckpointError(f"{store.name}: checkpoint {manifest.id} was committed by "
                                      f"another save; refusing to add rank {self.part.rank}'s "
                                      f"files to it")
            self.full = existing
            return True
        rec = {"version": 1, "id": manifest.id, "step": manifest.step, **self.part.as_dict(),
               "algo": manifest.algo, "chunk_size": manifest.chunk_size,
               "items": [asdict(e) for e in manifest.items]}
        store.put(part_key(self.tiers, manifest.id, self.part.rank),
                  json.dumps(rec, sort_keys=True).encode())
        return self.try_complete(store, manifest, states)

    def missing(self, store: ObjectStore, ckpt_id: str) -> list[int]:
        """The ranks of this save whose part is not in `store` (every record read)."""
        return sorted(set(range(self.part.world)) - set(self._parts(store, ckpt_id,
                                                                    complete=False)))

    def _parts(self, store: ObjectStore, ckpt_id: str, *,
               complete: bool = True) -> dict[int, dict[str, Any]]:
        """This save's part records in `store` by rank; with `complete`, none until there
        can be one per rank (cheap: one listing while a commit waits for the set)."""
        keys = store.list(parts_prefix(self.tiers, ckpt_id))
        if complete and len(keys) < self.part.world:
            return {}
        out = {}
        for key in keys:
            try:
                rec = json.loads(store.get(key))
            except ObjectMissing:
                continue
            if rec.get("save_uuid") == self.part.save_uuid and rec["rank"] < self.part.world:
                out[int(rec["rank"])] = rec
        return out

    def try_complete(self, store: ObjectStore, manifest: Manifest,
                     states: dict[str, float]) -> bool:
        parts = self._parts(store, manifest.id)
        if len(parts) != self.part.world:
            return False
        items = [ItemEntry(**i) for p in parts.values() for i in p["items"]]
        names = [i.name for i in items]
        if len(set(names)) != len(names):
            raise CheckpointError(f"checkpoint {manifest.id}: two ranks wrote the same file "
                                  f"name; each rank must write its own files")
        full = build_manifest(ckpt_id=manifest.id, step=manifest.step,
                              save_uuid=self.part.save_uuid, algo=manifest.algo,
                              chunk_size=manifest.chunk_size, items=items,
                              created_at=self.part.created_at, job=self.tiers.job)
        commit_manifest(store, self.tiers, full.for_tier(store.name, states))
        set_latest(store, self.tiers, full)
        self.full = full
        return True

    def await_complete(self, store: ObjectStore, manifest: Manifest, states: dict[str, float],
                       timeout_s: float) -> bool:
        """The coordinator waits (bounded) for the other ranks' background uploads."""
        deadline = time.monotonic() + timeout_s
        delay = 0.05
        while time.monotonic() < deadline:
            if self.tiers.read_manifest(store, manifest.id) is not None:
                return self.commit(store, manifest, states)
            if self.try_complete(store, manifest, states):
                return True
            # Polling the store is the synchronisation here: the other ranks are other
            # processes on other nodes, and the store is the only thing all of them reach.
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 1.0)
        return False


def local_part(tiers: Tiers, ckpt_id: str, part: SavePart) -> Manifest | None:
    """The rank's own share committed in its local directory, as a manifest of its items."""
    rec = read_part(tiers, tiers.local, ckpt_id, part.rank)
    if rec is None or rec.get("save_uuid") != part.save_uuid:
        return None
    return build_manifest(ckpt_id=ckpt_id, step=rec["step"], save_uuid=part.save_uuid,
                          algo=rec["algo"], chunk_size=rec["chunk_size"],
                          items=[ItemEntry(**i) for i in rec["items"]],
                          created_at=part.created_at, job=tiers.job)


def local_part_steps(tiers: Tiers) -> dict[str, int]:
    """{id: step} of every checkpoint of which this node holds part records."""
    out = {}
    prefix = tiers.layout.prefix + "/"
    for key in tiers.local.list(prefix):
        rest = key[len(prefix):].split("/")
        if len(rest) == 3 and rest[1] == "parts" and rest[2].startswith("rank-"):
            try:
                out[rest[0]] = int(json.loads(tiers.local.get(key))["step"])
            except (ObjectMissing, ValueError, KeyError, TypeError):
                out.setdefault(rest[0], -1)  # unreadable: oldest, so retention takes it first
    return out
