"""The manifest: the record that makes a checkpoint exist, and the per-checkpoint states.

A checkpoint moves staged -> local -> region -> replicated -> archived. Each tier commits its
own write-once manifest after all its data landed, so "a manifest in tier T" means "T holds a
complete copy"; the manifest carries the state times known at that commit, and the local
catalog keeps the full history, so every checkpoint's RPO (staged -> region) is known.

A manifest is trusted only after `Manifest.from_json` checked it: every field has its type,
each item agrees with its own chunk list, size and dtype/shape, the id matches the key it was
read from, and the checkpoint hash covers every field a reader acts on (version 2 and on;
version 3 adds the job the checkpoint belongs to). `states`
and `tier` differ from tier to tier by design and are history only: nothing is restored from
them, so they are outside the hash.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from rackscale.checkpoint.errors import CheckpointError, ManifestInvalid
from rackscale.checkpoint.hashing import HASHERS, combine, digest


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

# Version 1 hashed only the item hashes; version 2 hashes every field a reader trusts.
# Version 1 manifests are still read: their items are checked against their chunks, sizes
# and dtype/shape like any other, only their checkpoint hash does not bind those fields.
# Version 3 also binds `job` (the job that saved it, "" for none), so a copy cannot be passed
# off as another job's; versions 1 and 2 have no job.
MANIFEST_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
HASHED_FIELDS = ("version", "id", "step", "save_uuid", "algo", "chunk_size", "created_at",
                 "items", "job")
HISTORY_FIELDS = ("states", "tier")  # per tier, outside the hash, never acted on
ITEM_FIELDS = ("name", "size", "chunks", "hash", "meta")

# Element sizes of the tensor dtypes the saver writes (torch names); numpy dtypes use numpy.
TORCH_ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "complex128": 16,
    "complex64": 8, "complex32": 4, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
    "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1,
}


def current_state(states: dict[str, float]) -> CkptState | None:
    reached = [s for s in ORDER if s.value in states]
    return reached[-1] if reached else None


def advance(states: dict[str, float], to: CkptState, at: float | None = None) -> None:
    """Record `to` with its time; an illegal transition is a bug in the saver, so it raises."""
    cur = current_state(states)
    if to not in TRANSITIONS[cur]:
        raise CheckpointError(f"illegal checkpoint state transition {cur} -> {to.value}")
    states[to.value] = time.time() if at is None else at


def chunk_count(size: int, chunk_size: int) -> int:
    """Chunks an item of `size` bytes has: an empty item still has one (the empty hash)."""
    return max(1, -(-size // chunk_size))


@dataclass(slots=True)
class ItemEntry:
    name: str
    size: int
    chunks: list[str]
    hash: str
    # dtype/shape of a tensor, or {} for raw bytes
    meta: dict[str, Any] = field(default_factory=dict)


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
    version: int = MANIFEST_VERSION
    job: str = ""  # the job that saved it ("" for none, and in versions 1 and 2)

    @classmethod
    def new(cls, *, id: str, step: int, save_uuid: str, algo: str, chunk_size: int,
            items: list[ItemEntry], created_at: float, job: str = "") -> Manifest:
        """A manifest for a new save: current version, hash computed, checked like a read."""
        m = cls(id=id, step=step, save_uuid=save_uuid, algo=algo, chunk_size=chunk_size,
                items=items, hash="", created_at=created_at, job=job)
        m.hash = checkpoint_hash(m)
        check_manifest(m, where=f"new manifest of {id}")
        return m

    @property
    def total_bytes(self) -> int:
        return sum(i.size for i in self.items)

    def to_json(self) -> bytes:
        doc = asdict(self)
        if self.version < 3:  # an old manifest copied to another tier stays what it was
            del doc["job"]
        return json.dumps(doc, indent=1, sort_keys=True, allow_nan=False).encode()

    @classmethod
    def from_json(cls, data: bytes | str, *, expect_id: str | None = None,
                  where: str = "manifest") -> Manifest:
        """Parse and check a manifest; anything wrong raises ManifestInvalid naming `where`."""
        try:
            raw = json.loads(data)
        except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
            raise ManifestInvalid(f"{where}: not valid JSON ({err})") from None
        m = parse_manifest(raw, where)
        if expect_id is not None and m.id != expect_id:
            raise ManifestInvalid(f"{where}: field `id` is {m.id!r} but the manifest is stored "
                                  f"under {expect_id!r}")
        check_manifest(m, where=where)
        return m

    def for_tier(self, tier: str, states: dict[str, float]) -> Manifest:
        return Manifest(id=self.id, step=self.step, save_uuid=self.save_uuid, algo=self.algo,
                        chunk_size=self.chunk_size, items=self.items, hash=self.hash,
                        created_at=self.created_at, states=dict(states), tier=tier,
                        version=self.version, job=self.job)


# --- the checkpoint hash ------------------------------------------------------------------------
def _canonical(m: Manifest) -> bytes:
    doc = {"version": m.version, "id": m.id, "step": m.step, "save_uuid": m.save_uuid,
           "algo": m.algo, "chunk_size": m.chunk_size, "created_at": m.created_at,
           "items": [asdict(i) for i in m.items]}
    if m.version >= 3:
        doc["job"] = m.job
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False).encode()


def checkpoint_hash(m: Manifest) -> str:
    """Version 2: the hash of a canonical JSON of every hashed field, items in full. Version 1:
    the hash over the item hashes only (kept so old manifests still verify)."""
    if m.version == 1:
        return combine([i.hash for i in m.items], m.algo)
    return digest(_canonical(m), m.algo)


# --- parsing: every field with its type ----------------------------------------------------------
def _typed(raw: dict[str, Any], name: str, kinds: tuple[type, ...], where: str) -> Any:
    if name not in raw:
        raise ManifestInvalid(f"{where}: field `{name}` is missing")
    v = raw[name]
    # bool is an int in Python; a manifest that says `"size": true` is still wrong.
    if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
        want = " or ".join(k.__name__ for k in kinds)
        raise ManifestInvalid(f"{where}: field `{name}` must be {want}, not "
                              f"{type(v).__name__} ({str(v)[:40]!r})")
    return v


def _no_extra(raw: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    extra = sorted(set(raw) - set(allowed))
    if extra:
        raise ManifestInvalid(f"{where}: unknown field(s) {extra}; a field outside the "
                              f"checkpoint hash cannot be trusted")


def _parse_item(raw: Any, where: str) -> ItemEntry:
    if not isinstance(raw, dict):
        raise ManifestInvalid(f"{where}: must be an object, not {type(raw).__name__}")
    _no_extra(raw, ITEM_FIELDS, where)
    chunks = _typed(raw, "chunks", (list,), where)
    for n, c in enumerate(chunks):
        if not isinstance(c, str):
            raise ManifestInvalid(f"{where}: chunks[{n}] must be str, not {type(c).__name__}")
    return ItemEntry(name=_typed(raw, "name", (str,), where),
                     size=_typed(raw, "size", (int,), where), chunks=list(chunks),
                     hash=_typed(raw, "hash", (str,), where),
                     meta=_typed(raw, "meta", (dict,), where) if "meta" in raw else {})


def parse_manifest(raw: Any, where: str) -> Manifest:
    if not isinstance(raw, dict):
        raise ManifestInvalid(f"{where}: must be a JSON object, not {type(raw).__name__}")
    version = _typed(raw, "version", (int,), where)
    if version not in READABLE_VERSIONS:
        raise ManifestInvalid(f"{where}: manifest version {version} is not supported (this "
                              f"rackscale reads {list(READABLE_VERSIONS)}); upgrade rackscale")
    fields = HASHED_FIELDS if version >= 3 else tuple(f for f in HASHED_FIELDS if f != "job")
    _no_extra(raw, (*fields, "hash", *HISTORY_FIELDS), where)
    items = [_parse_item(it, f"{where}: items[{n}]")
             for n, it in enumerate(_typed(raw, "items", (list,), where))]
    states = _typed(raw, "states", (dict,), where) if "states" in raw else {}
    for k, v in states.items():
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise ManifestInvalid(f"{where}: states[{k!r}] must be a time in seconds")
    return Manifest(id=_typed(raw, "id", (str,), where), step=_typed(raw, "step", (int,), where),
                    save_uuid=_typed(raw, "save_uuid", (str,), where),
                    algo=_typed(raw, "algo", (str,), where),
                    chunk_size=_typed(raw, "chunk_size", (int,), where), items=items,
                    hash=_typed(raw, "hash", (str,), where),
                    created_at=_typed(raw, "created_at", (int, float), where),
                    states=dict(states), tier=_typed(raw, "tier", (str,), where)
                    if "tier" in raw else "local", version=version,
                    job=_typed(raw, "job", (str,), where) if version >= 3 else "")


# --- checks: an item against its chunks, size and dtype/shape; the manifest against its hash ---
def _itemsize(meta: dict[str, Any], where: str) -> int | None:
    """Bytes per element of a tensor item, or None for raw bytes (no shape to agree with)."""
    kind = meta.get("kind", "bytes")
    if kind == "bytes":
        return None
    dtype = meta.get("dtype")
    if not isinstance(dtype, str):
        raise ManifestInvalid(f"{where}: meta.dtype must be a dtype name, not {dtype!r}")
    if kind == "torch":
        if dtype not in TORCH_ITEMSIZE:
            raise ManifestInvalid(f"{where}: meta.dtype {dtype!r} is not a tensor dtype; valid: "
                                  f"{', '.join(sorted(TORCH_ITEMSIZE))}")
        return TORCH_ITEMSIZE[dtype]
    if kind == "numpy":
        try:
            dt = np.dtype(dtype)
        except TypeError:
            raise ManifestInvalid(f"{where}: meta.dtype {dtype!r} is not a numpy dtype") from None
        if dt.hasobject:  # would need pickle to decode: never from a manifest
            raise ManifestInvalid(f"{where}: meta.dtype {dtype!r} holds Python objects")
        return dt.itemsize
    raise ManifestInvalid(f"{where}: meta.kind {kind!r} is unknown; valid: bytes, numpy, torch")


def check_item(it: ItemEntry, chunk_size: int, algo: str, where: str) -> None:
    """An item must agree with itself: name, size, chunk list, item hash, dtype x shape."""
    if not it.name or "/" in it.name or "\0" in it.name or it.name in (".", ".."):
        raise ManifestInvalid(f"{where}: item name {it.name!r} is not a plain file name")
    if it.size < 0:
        raise ManifestInvalid(f"{where}: size {it.size} is negative")
    want = chunk_count(it.size, chunk_size)
    if len(it.chunks) != want:
        raise ManifestInvalid(f"{where}: {len(it.chunks)} chunk hash(es) for {it.size} bytes; "
                              f"chunks of {chunk_size} bytes need {want}")
    hexlen = len(digest(b"", algo))
    for n, c in enumerate(it.chunks):
        if len(c) != hexlen or c.strip("0123456789abcdef"):
            raise ManifestInvalid(f"{where}: chunks[{n}] is not a {algo} hex digest")
    if combine(it.chunks, algo) != it.hash:
        raise ManifestInvalid(f"{where}: item hash does not match its chunk hashes")
    per = _itemsize(it.meta, where)
    if per is not None:
        shape = it.meta.get("shape")
        if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise ManifestInvalid(f"{where}: meta.shape must be a list of sizes, not {shape!r}")
        if math.prod(shape) * per != it.size:
            raise ManifestInvalid(f"{where}: shape {shape} of {it.meta['dtype']} is "
                                  f"{math.prod(shape) * per} bytes but the item has {it.size}")


def check_manifest(m: Manifest, *, where: str) -> None:
    """Everything a reader acts on must agree: then the checkpoint hash must match."""
    if m.algo not in HASHERS:
        raise ManifestInvalid(f"{where}: hash algorithm {m.algo!r} is unknown; valid: "
                              f"{', '.join(HASHERS)}")
    if m.chunk_size <= 0:
        raise ManifestInvalid(f"{where}: chunk_size {m.chunk_size} must be positive")
    if m.step < 0:
        raise ManifestInvalid(f"{where}: step {m.step} is negative")
    if not math.isfinite(m.created_at):
        raise ManifestInvalid(f"{where}: created_at is not a finite time")
    seen: set[str] = set()
    for n, it in enumerate(m.items):
        check_item(it, m.chunk_size, m.algo, f"{where}: items[{n}] ({it.name!r})")
        if it.name in seen:
            raise ManifestInvalid(f"{where}: item {it.name!r} appears twice")
        seen.add(it.name)
    try:
        want = checkpoint_hash(m)
    except ValueError as err:  # NaN/inf in meta: not canonical JSON
        raise ManifestInvalid(f"{where}: cannot be hashed ({err})") from None
    if want != m.hash:
        raise ManifestInvalid(f"{where}: does not match its own checkpoint hash (version "
                              f"{m.version}): a field was changed after the save")


# --- the `latest` pointer -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LatestPointer:
    id: str
    step: int
    hash: str = ""


def latest_json(m: Manifest, pid: int) -> bytes:
    return json.dumps({"id": m.id, "step": m.step, "hash": m.hash, "pid": pid}).encode()


def parse_latest(data: bytes | str, where: str = "latest") -> LatestPointer:
    """A pointer one tier holds; a bad one is that tier's problem, never the reader's crash."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ManifestInvalid(f"{where}: not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ManifestInvalid(f"{where}: must be a JSON object, not {type(raw).__name__}")
    ptr = LatestPointer(id=_typed(raw, "id", (str,), where),
                        step=_typed(raw, "step", (int,), where),
                        hash=_typed(raw, "hash", (str,), where) if "hash" in raw else "")
    # The id becomes part of a key in every tier: one that is not a plain name (".." climbs
    # out of the prefix, a NUL is no path at all) names no checkpoint anywhere.
    if not is_plain_id(ptr.id) or ptr.step < 0:
        raise ManifestInvalid(f"{where}: id {ptr.id!r} / step {ptr.step} is not a checkpoint")
    return ptr


def is_plain_id(ckpt_id: str) -> bool:
    """Whether `ckpt_id` can be one path segment of a key: not empty, `.` or `..`, no `/`,
    backslash or control character."""
    return ckpt_id not in ("", ".", "..") and not any(
        c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in ckpt_id)


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
        """Ids of the manifests right under the prefix: a job's key space below it
        (`<prefix>/jobs/<job>/...`) holds that job's checkpoints, not this layout's."""
        head = self.prefix + "/"
        out = set()
        for k in keys:
            parts = k[len(head):].split("/") if k.startswith(head) else []
            if len(parts) == 2 and parts[1] == "manifest.json":
                out.add(parts[0])
        return sorted(out)
