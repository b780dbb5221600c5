"""A storage profile: the checkpoint figures of the user's own tiers, measured, with where/when.

`measure_profile(cfg, sizes)` saves a random state of each size through the tiers (the saver
that training uses), records the training stall of the async save and the time from the save
call to each durable state (local NVMe, region, every other region, archive), then restores it
from each tier on its own (the local cache warm; every remote tier into an empty cache) and
times that. Every figure is the median of `reps` runs and keeps its samples, the tier it was
measured on and the time. A tiny probe size is always measured beside the asked sizes, so each
figure can be fitted to the affine model `t(S) = latency + S / bandwidth` (latency-bound below
the crossover size latency x bandwidth, bandwidth-bound above): that is how the simulator
scales the figures to a job's checkpoint size.

The file format (`profile.json`) is versioned: `schema_version` 1. Everything the profile
writes or reads under its own prefix is removed again.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import socket
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rackscale.checkpoint.config import Retention, StoreSpec, TiersConfig
from rackscale.checkpoint.errors import CheckpointError, ConfigError
from rackscale.checkpoint.objectstore import LocalDirStore
from rackscale.checkpoint.restore import Restorer
from rackscale.checkpoint.saver import CheckpointManager
from rackscale.checkpoint.tiers import Tiers
from rackscale.inputs import load_json, read_text
from rackscale.redact import redact_url

SCHEMA: Final = "rackscale.storage-profile"
SCHEMA_VERSION: Final = 1
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PROBE_BYTES = 64 * KiB
MEASURED = "measured on the tiers named in `tiers`, at the times given per figure"
Role = Literal["local", "region", "replica", "archive"]
Seconds = Annotated[float, Field(ge=0)]
Progress = Callable[[str, int, int], None]


class ProfileError(ConfigError):
    """A profile file that cannot be used: the message names the file, the field and the fix."""


class Figure(BaseModel):
    """One measured time: the median of its samples, where and when it was measured."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    seconds: Seconds
    samples: list[Seconds] = Field(min_length=1)
    where: str = Field(min_length=1)
    at: datetime


class TierInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    role: Role
    kind: Literal["dir", "s3"]
    where: str


class SaveFigures(BaseModel):
    """Times of one async save, from the save call: the stall, then each durable state."""

    model_config = ConfigDict(extra="forbid")
    stall: Figure
    local: Figure
    region: Figure
    replicated: Figure | None = None  # None: the tiers have no other region
    archived: Figure | None = None  # None: no archive tier


class Point(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bytes: int = Field(gt=0)
    probe: bool = False  # the small size measured for the latency term
    save: SaveFigures
    restore: dict[str, Figure]  # tier name -> restore of the whole checkpoint from it


class StorageProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    schema_name: Literal["rackscale.storage-profile"] = Field(default=SCHEMA, alias="schema")
    schema_version: Literal[1] = SCHEMA_VERSION
    measured: Literal[True] = True
    note: str = MEASURED
    host: str
    started_at: datetime
    finished_at: datetime
    tiers: list[TierInfo] = Field(min_length=2)
    points: list[Point] = Field(min_length=1)

    @model_validator(mode="after")
    def _complete(self) -> StorageProfile:
        names = [t.name for t in self.tiers]
        if len(set(names)) != len(names):
            raise ValueError(f"tier names must be unique: {names}")
        roles = [t.role for t in self.tiers]
        for role in ("local", "region"):
            if roles.count(role) != 1:
                raise ValueError(f"tiers: needs exactly one tier of role {role!r} "
                                 f"(has {roles.count(role)})")
        for i, p in enumerate(self.points):
            missing = sorted(set(names) - set(p.restore))
            if missing:
                raise ValueError(f"points.{i}.restore: no restore figure for tier(s) "
                                 f"{', '.join(missing)}")
            if ("replica" in roles) != (p.save.replicated is not None):
                raise ValueError(f"points.{i}.save.replicated: must be given exactly when a "
                                 "tier of role 'replica' is listed")
            if ("archive" in roles) != (p.save.archived is not None):
                raise ValueError(f"points.{i}.save.archived: must be given exactly when a "
                                 "tier of role 'archive' is listed")
        return self

    def tier(self, role: Role) -> TierInfo | None:
        """The first tier of `role` (the other region a job moves to is the first replica)."""
        return next((t for t in self.tiers if t.role == role), None)

    def fits(self) -> dict[str, dict[str, float]]:
        """Each figure fitted to t(S) = latency + S / bandwidth over the measured sizes.

        Keys: `stall`, `local`, `region`, `replicated`, `archived` (save side, from the save
        call) and `restore.<role>` (local, region, replica, archive)."""
        sizes = [p.bytes for p in self.points]
        out: dict[str, dict[str, float]] = {}
        for key in ("stall", "local", "region", "replicated", "archived"):
            figs = [getattr(p.save, key) for p in self.points]
            if all(f is not None for f in figs):
                out[key] = fit_affine(sizes, [f.seconds for f in figs])
        for role in ("local", "region", "replica", "archive"):
            t = self.tier(role)
            if t is not None:
                out[f"restore.{role}"] = fit_affine(
                    sizes, [p.restore[t.name].seconds for p in self.points])
        return out


def fit_affine(sizes: list[int], seconds: list[float]) -> dict[str, float]:
    """Least squares of t = latency + S / bandwidth, latency >= 0; `crossover_bytes` is the
    size where the two terms are equal (below it the time is mostly latency)."""
    n = len(sizes)
    mx, my = sum(sizes) / n, sum(seconds) / n
    sxx = sum((x - mx) ** 2 for x in sizes)
    slope = sum((x - mx) * (y - my) for x, y in zip(sizes, seconds, strict=True)) / sxx \
        if sxx > 0 else 0.0
    lat = my - slope * mx
    if slope <= 0:  # noise at sizes too close to tell: all latency
        lat, slope = max(seconds), 0.0
    elif lat < 0:  # through the origin: all bandwidth
        lat = 0.0
        slope = sum(x * y for x, y in zip(sizes, seconds, strict=True)) / sum(x * x for x in sizes)
    bw = 1 / slope if slope > 0 else math.inf
    return {"latency_s": lat, "bandwidth_Bps": bw,
            "crossover_bytes": lat * bw if math.isfinite(bw) else math.inf}


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)?\s*$",
                   re.IGNORECASE)
_UNITS = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1 << 40, "kb": 10**3,
          "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str, *, option: str = "--ckpt-size", limit: int = 64 * GiB) -> int:
    m = _SIZE.match(text)
    if not m:
        raise ProfileError(f"{option} {text!r}: give a size such as 64MiB, 1GiB or 500MB")
    size = int(float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()])
    if size <= 0 or size > limit:
        raise ProfileError(f"{option} {text!r}: give a size between 1 B and {_fmt(limit)}")
    return size


# ------------------------------------------------------------------------ reading a profile
# `--out` of `checkpoint profile` is a directory; the file it writes there is this one.
PROFILE_HINT = ("`rackscale checkpoint profile --out DIR` (it writes "
                "DIR/storage-profile.json)")


def parse_profile(data: object, source: str = "profile") -> StorageProfile:
    if not isinstance(data, dict):
        raise ProfileError(f"{source}: a storage profile is a JSON object; measure one with "
                           + PROFILE_HINT)
    version = data.get("schema_version")
    if data.get("schema") != SCHEMA or version != SCHEMA_VERSION:
        raise ProfileError(
            f"{source}: schema {data.get('schema')!r} version {version!r} is not one this "
            f"rackscale reads ({SCHEMA!r} version {SCHEMA_VERSION}); measure the profile again "
            f"with {PROFILE_HINT}")
    try:
        return StorageProfile.model_validate(data)
    except ValidationError as err:
        lines = []
        for e in err.errors()[:3]:
            loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
            lines.append(f"{loc}: {e['msg'].removeprefix('Value error, ')}")
        raise ProfileError(f"{source}: " + "; ".join(lines) + " (the format is in "
                           "docs/checkpoint.md; measure again with `rackscale checkpoint "
                           "profile`)") from None


def load_profile(path: str | Path) -> StorageProfile:
    p = Path(path)
    if not p.is_file():
        raise ProfileError(f"storage profile {p} does not exist; measure one with "
                           + PROFILE_HINT)
    text = read_text(p, "storage profile", error=ProfileError)
    return parse_profile(load_json(text, str(p), error=ProfileError), str(p))


# ------------------------------------------------------------------------ measuring one
def _where(spec: StoreSpec) -> str:
    if spec.kind == "dir":
        return spec.path or ""
    return f"{redact_url(spec.endpoint or '', keep_user=False)}/{spec.bucket}"


def _tier_infos(cfg: TiersConfig) -> list[tuple[TierInfo, StoreSpec | None]]:
    out: list[tuple[TierInfo, StoreSpec | None]] = [
        (TierInfo(name="local", role="local", kind="dir", where=cfg.local_dir), None),
        (TierInfo(name=cfg.region.name, role="region", kind=cfg.region.kind,
                  where=_where(cfg.region)), cfg.region)]
    out += [(TierInfo(name=r.name, role="replica", kind=r.kind, where=_where(r)), r)
            for r in cfg.replicas]
    if cfg.archive is not None:
        out.append((TierInfo(name=cfg.archive.name, role="archive", kind=cfg.archive.kind,
                             where=_where(cfg.archive)), cfg.archive))
    return out


def _figure(samples: list[float], where: str) -> Figure:
    return Figure(seconds=statistics.median(samples), samples=samples, where=where,
                  at=datetime.now(UTC))


class _Run:
    """One profiling run: its own prefix and local directory, removed at the end."""

    def __init__(self, cfg: TiersConfig, reps: int, progress: Progress | None) -> None:
        tag = uuid.uuid4().hex[:8]
        self.local = Path(cfg.local_dir) / f".profile-{tag}"
        keep = reps + 2
        self.cfg = cfg.model_copy(update={
            "local_dir": str(self.local), "prefix": f"{cfg.prefix}-profile-{tag}",
            "retention": Retention(keep_local=keep, keep_region=keep,
                                   archive_every=1 if cfg.archive else 0, keep_archived=keep)})
        self.reps, self.progress = reps, progress
        self.infos = _tier_infos(cfg)
        self.step, self.done, self.total = 0, 0, 0

    def tick(self, what: str) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(what, self.done, self.total)

    def save(self, mgr: CheckpointManager, state: dict[str, Any]) -> tuple[str, dict[str, float]]:
        self.step += 1
        rep = mgr.save(self.step, state).wait()
        if rep.errors:
            tier, why = next(iter(rep.errors.items()))
            raise CheckpointError(f"profile: the save to tier {tier} failed ({why}); fix the "
                                  "tier (or its entry in --config) and measure again")
        call = rep.states["staged"] - rep.stall_s
        return rep.id, {"stall": rep.stall_s} | {k: v - call for k, v in rep.states.items()}

    def point(self, size: int, probe: bool) -> Point:
        import numpy as np
        state = {"profile": np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)}
        keys = {"stall": "stall", "local": "local", "region": "region",
                "replicated": "replicated", "archived": "archived"}
        got: dict[str, list[float]] = {k: [] for k in keys}
        with CheckpointManager(Tiers(self.cfg)) as mgr:
            self.save(mgr, state)  # staging buffers allocated once, as in a training loop
            self.tick(f"save {_fmt(size)} (warm-up)")
            for _ in range(self.reps):
                ckpt_id, times = self.save(mgr, state)
                for k in keys:
                    if k in times:
                        got[k].append(times[k])
                self.tick(f"save {_fmt(size)}")
        where = {"stall": "host memory", "local": self.cfg.local_dir,
                 "region": self.infos[1][0].where}
        rep = [i.where for i, _ in self.infos if i.role == "replica"]
        arc = [i.where for i, _ in self.infos if i.role == "archive"]
        where |= {"replicated": ", ".join(rep), "archived": ", ".join(arc)}
        save = {k: _figure(v, where[k]) for k, v in got.items() if v}
        restore = {info.name: self.restore(ckpt_id, info, spec, size)
                   for info, spec in self.infos}
        return Point(bytes=size, probe=probe, save=SaveFigures(**save), restore=restore)

    def restore(self, ckpt_id: str, info: TierInfo, spec: StoreSpec | None, size: int) -> Figure:
        samples = []
        for n in range(self.reps):
            if spec is None:  # the local cache, warm: the restore after a process crash
                tiers, scratch = Tiers(self.cfg), None
            else:  # this tier alone, into an empty cache (the node is new or was wiped)
                scratch = self.local / f"restore-{info.name}-{n}"
                tiers = Tiers(self.cfg.model_copy(update={
                    "local_dir": str(scratch), "region": spec, "replicas": [],
                    "archive": None}))
            t0 = time.perf_counter()  # client set-up above is not part of the restore
            rep = Restorer(tiers).restore(ckpt_id)
            samples.append(time.perf_counter() - t0)
            if rep.tier != info.name:
                raise CheckpointError(f"profile: the restore meant for tier {info.name} was "
                                      f"served by {rep.tier}; the tier is not readable as "
                                      "configured")
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            self.tick(f"restore {_fmt(size)} from {info.name}")
        return _figure(samples, info.where)

    def cleanup(self) -> None:
        tiers = Tiers(self.cfg)
        for store in tiers.remote:
            with contextlib.suppress(CheckpointError):
                for key in store.list(self.cfg.prefix + "/"):
                    store.delete(key)
                if isinstance(store, LocalDirStore):  # its directories too
                    shutil.rmtree(store.path(self.cfg.prefix), ignore_errors=True)
        shutil.rmtree(self.local, ignore_errors=True)


def _fmt(size: int) -> str:
    for unit, n in (("TiB", 1 << 40), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if size >= n:
            return f"{size / n:g} {unit}"
    return f"{size} B"


def measure_profile(cfg: TiersConfig, sizes: list[int], *, reps: int = 3,
                    progress: Progress | None = None,
                    probe_bytes: int = PROBE_BYTES) -> StorageProfile:
    """Measure the profile of `cfg`'s tiers at `sizes` (plus the latency probe size)."""
    if reps < 1:
        raise ProfileError(f"--reps {reps}: give at least 1")
    all_sizes = sorted({probe_bytes, *sizes})
    run = _Run(cfg, reps, progress)
    run.total = len(all_sizes) * (1 + reps + reps * len(run.infos))
    started = datetime.now(UTC)
    try:
        points = [run.point(s, probe=s == probe_bytes and s not in sizes) for s in all_sizes]
    finally:
        run.cleanup()
    return StorageProfile(host=socket.gethostname(), started_at=started,
                          finished_at=datetime.now(UTC),
                          tiers=[i for i, _ in run.infos], points=points)
