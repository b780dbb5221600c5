"""The manifest: the record that makes a checkpoint exist, and the per-checkpoint states.

A checkpoint moves staged -> local -> region -> replicated -> archived. Each tier commits its
own write-once manifest after all its data landed, so "a manifest in tier T" means "T holds a
complete copy"; the manifest carries the state times known at that commit, and the local
catalog keeps the full history, so every checkpoint's RPO (staged -> region) is known.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum

from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.hashing import combine


class CkptState(StrEnum):
    STAGED = "staged"
    """Copied to host memory; the training loop may go on. Lost if the process dies."""
    LOCAL = "local"
    """On the local NVMe directory with a committed local manifest; survives a process crash."""
    REGION = "region"
    """Complete in the region object store; survives the loss of the node. RPO ends here."""
    REPLICATED = "replicated"
    """Complete in every other region; survives the loss of a region."""
    ARCHIVED = "archived"
    """Also in the archive bucket (every m-th checkpoint), kept by its own retention."""


# Explicit transition table: a checkpoint without replicas goes region -> archived directly.
TRANSITIONS: dict[CkptState | None, set[CkptState]] = {
    None: {CkptState.STAGED},
    CkptState.STAGED: {CkptState.LOCAL},
    CkptState.LOCAL: {CkptState.REGION},
    CkptState.REGION: {CkptState.REPLICATED, CkptState.ARCHIVED},
    CkptState.REPLICATED: {CkptState.ARCHIVED},
    CkptState.ARCHIVED: set(),
}
ORDER = list(CkptState)


def current_state(states: dict[str, float]) -> CkptState | None:
    reached = [s for s in ORDER if s.value in states]
    return reached[-1] if reached else None


def advance(states: dict[str, float], to: CkptState, at: float | None = None) -> None:
    """Record `to` with its time; an illegal transition is a bug in the saver, so it raises."""
    cur = current_state(states)
    if to not in TRANSITIONS[cur]:
        raise CheckpointError(f"illegal checkpoint state transition {cur} -> {to.value}")
    states[to.value] = time.time() if at is None else at


@dataclass(slots=True)
class ItemEntry:
    name: str
    size: int
    chunks: list[str]
    hash: str
    meta: dict = field(default_factory=dict)  # dtype/shape of a tensor, or {} for raw bytes


@dataclass(slots=True)
class Manifest:
    id: str
    step: int
    save_uuid: str
    algo: str
    chunk_size: int
    items: list[ItemEntry]
    hash: str
    created_at: float
    states: dict[str, float] = field(default_factory=dict)
    tier: str = "local"
    version: int = 1

    def item(self, name: str) -> ItemEntry:
        for it in self.items:
            if it.name == name:
                return it
        raise CheckpointError(f"checkpoint {self.id} has no item {name!r}; items: "
                              f"{[i.name for i in self.items]}")

    @property
    def total_bytes(self) -> int:
        return sum(i.size for i in self.items)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Manifest:
        raw = json.loads(data)
        if raw.get("version") != 1:
            raise CheckpointError(f"manifest version {raw.get('version')} is not supported")
        raw["items"] = [ItemEntry(**i) for i in raw["items"]]
        m = cls(**raw)
        if combine([i.hash for i in m.items], m.algo) != m.hash:
            raise CheckpointError(f"manifest of {m.id} does not match its own checkpoint hash")
        return m

    def for_tier(self, tier: str, states: dict[str, float]) -> Manifest:
        return Manifest(id=self.id, step=self.step, save_uuid=self.save_uuid, algo=self.algo,
                        chunk_size=self.chunk_size, items=self.items, hash=self.hash,
                        created_at=self.created_at, states=dict(states), tier=tier)


def ckpt_id_for(step: int) -> str:
    return f"step-{step:08d}"


class Layout:
    """Key names, the same in every store, so any tier can serve any other's readers."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def data(self, ckpt_id: str, item: str) -> str:
        return f"{self.prefix}/{ckpt_id}/data/{item}"

    def data_prefix(self, ckpt_id: str) -> str:
        return f"{self.prefix}/{ckpt_id}/data/"

    def manifest(self, ckpt_id: str) -> str:
        return f"{self.prefix}/{ckpt_id}/manifest.json"

    def ckpt_prefix(self, ckpt_id: str) -> str:
        return f"{self.prefix}/{ckpt_id}/"

    @property
    def latest(self) -> str:
        return f"{self.prefix}/latest"

    def ids_from_keys(self, keys: list[str]) -> list[str]:
        out = {k.split("/")[1] for k in keys if k.endswith("/manifest.json")
               and k.startswith(self.prefix + "/")}
        return sorted(out)
