"""Typed, validated configuration of the tiers (a YAML/JSON file or built in code).

Secrets never sit on a command line: an S3 tier names the environment variables that hold its
keys (`access_key_env`, `secret_key_env`); inline keys are accepted only from a file or code.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rackscale.checkpoint.errors import ConfigError
from rackscale.checkpoint.hashing import DEFAULT_ALGO
from rackscale.checkpoint.objectstore import LocalDirStore, ObjectStore
from rackscale.inputs import load_json, load_yaml_data, read_text
from rackscale.redact import redact_url

MiB = 1 << 20


class StoreSpec(BaseModel):
    """One object store: `kind: dir` (a directory) or `kind: s3` (an endpoint and bucket)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    kind: Literal["dir", "s3"]
    path: str | None = None
    endpoint: str | None = None
    bucket: str | None = None
    region: str = "us-east-1"
    access_key_env: str = "AWS_ACCESS_KEY_ID"
    secret_key_env: str = "AWS_SECRET_ACCESS_KEY"
    access_key: str | None = Field(default=None, repr=False)
    secret_key: str | None = Field(default=None, repr=False)
    timeout_s: float = Field(default=5.0, gt=0)

    @model_validator(mode="after")
    def _complete(self) -> StoreSpec:
        if self.kind == "dir" and not self.path:
            raise ValueError(f"store {self.name!r}: kind 'dir' needs `path` (a directory)")
        if self.kind == "s3" and not (self.endpoint and self.bucket):
            raise ValueError(f"store {self.name!r}: kind 's3' needs `endpoint` "
                             f"(http://host:port) and `bucket`")
        if self.kind == "s3" and self.endpoint:
            _check_endpoint(self.name, self.endpoint)
        return self

    def build(self) -> ObjectStore:
        if self.kind == "dir":
            return LocalDirStore(Path(self.path or "."), name=self.name)
        from rackscale.checkpoint.s3store import S3Store

        access = self.access_key or os.environ.get(self.access_key_env)
        secret = self.secret_key or os.environ.get(self.secret_key_env)
        if not access or not secret:
            raise ConfigError(f"store {self.name!r}: no credentials; set the environment "
                              f"variables {self.access_key_env} and {self.secret_key_env}")
        return S3Store(name=self.name, endpoint=self.endpoint or "", bucket=self.bucket or "",
                       access_key=access, secret_key=secret, region=self.region,
                       timeout_s=self.timeout_s)


def _check_endpoint(name: str, endpoint: str) -> None:
    """An S3 endpoint is `http(s)://host[:port][/path]`: the S3 client builds every request URL
    from it and takes no query string or fragment (a token there would be sent nowhere useful
    and shown in its errors). Messages show the endpoint redacted."""
    shown = redact_url(endpoint, keep_user=False)
    form = "give it as http://host:port (or https://...)"
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port
    except ValueError:
        raise ValueError(f"store {name!r}: endpoint {shown} is not a URL (a bad port or "
                         f"address); {form}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"store {name!r}: endpoint {shown} needs a scheme http or https and a "
                         f"host; {form}")
    if parts.query or parts.fragment or endpoint.rstrip().endswith(("?", "#")):
        raise ValueError(f"store {name!r}: endpoint {shown} has a query string or fragment, "
                         f"which an S3 endpoint does not take; {form}, and give its keys "
                         f"through the environment variables named by access_key_env and "
                         f"secret_key_env")
    if port == 0:
        raise ValueError(f"store {name!r}: endpoint {shown} has port 0; {form}")


class Retention(BaseModel):
    """Keep the last `keep_local` on local NVMe, `keep_region` in the region and each replica,
    every `archive_every`-th checkpoint in the archive (0: none), the last `keep_archived` there.
    """

    model_config = ConfigDict(extra="forbid")
    keep_local: int = Field(default=2, ge=1)
    keep_region: int = Field(default=5, ge=1)
    archive_every: int = Field(default=10, ge=0)
    keep_archived: int | None = Field(default=None, ge=1)


class TiersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    local_dir: str = Field(min_length=1)
    region: StoreSpec
    replicas: list[StoreSpec] = Field(default_factory=list)
    archive: StoreSpec | None = None
    prefix: str = Field(default="ckpt", pattern=r"^[A-Za-z0-9_.-]+$")
    # The job these checkpoints belong to (None: checkpoints of no job). A job has its own
    # key space (`<prefix>/jobs/<job>/`) and local bookkeeping, its manifests name it, and a
    # restore through a job's tiers refuses another job's manifest: two jobs that share one
    # tiers config never resume each other's checkpoints.
    job: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$",
                            max_length=128)
    # The hash unit (verified and repaired one by one) and the upload unit (an S3 part).
    chunk_size: int = Field(default=4 * MiB, ge=4096)
    part_size: int = Field(default=16 * MiB, ge=4096)
    upload_parallelism: int = Field(default=8, ge=1, le=64)
    restore_parallelism: int = Field(default=8, ge=1, le=64)
    backpressure: Literal["wait", "skip"] = "wait"
    hash_algo: Literal["blake3", "sha256"] = DEFAULT_ALGO  # type: ignore[assignment]  # one of the two; a str to mypy
    retention: Retention = Field(default_factory=Retention)
    fsync: bool = True
    # A multi-rank save: how long the coordinator waits in the background for the other
    # ranks' parts to reach a tier before it records the tier as incomplete (resume retries).
    commit_timeout_s: float = Field(default=300.0, gt=0)
    # Niceness added to the threads that push to the tiers after a save has returned, so that
    # they yield the CPU to training and to the saves of other ranks on the node. Off by
    # default: on a machine busy with other work a nicer push only takes longer.
    background_nice: int = Field(default=0, ge=0, le=19)
    # The I/O class of the same threads. `idle`: the disk serves them when nothing else asks
    # for it, so the pushes of ranks that are done do not slow the local writes of the ranks
    # still saving on the same node (Linux, with an I/O scheduler that honours classes:
    # mq-deadline, bfq; it ages idle requests, so a busy disk delays a push, never stops it).
    background_io: Literal["normal", "idle"] = "idle"
    # False: the node's local NVMe cache is only where a save is staged before its push; a
    # job's restore (the DCP reader its ranks use) never reads it and fetches every chunk from
    # the remote tiers, as a node without a local cache would (`simulate storage-whatif`'s
    # setups without one). Strict: a quoted "false" is refused, not read as true.
    local_cache: bool = Field(default=True, strict=True)

    @model_validator(mode="after")
    def _sizes(self) -> TiersConfig:
        if self.part_size % self.chunk_size:
            raise ValueError(f"part_size ({self.part_size}) must be a multiple of chunk_size "
                             f"({self.chunk_size}) so that parts hold whole chunks")
        names = [self.region.name, *(r.name for r in self.replicas)]
        names += [self.archive.name] if self.archive else []
        if len(set(names)) != len(names) or "local" in names:
            raise ValueError(f"store names must be unique and not 'local': {names}")
        return self


def for_job(cfg: TiersConfig, job: str) -> TiersConfig:
    """`cfg` scoped to one job (see `TiersConfig.job`); refused if it names another job."""
    if cfg.job is not None and cfg.job != job:
        raise ConfigError(f"tiers config is scoped to job {cfg.job!r}, not {job!r}; give the "
                          f"job a config without `job` (the supervisor adds it)")
    try:
        return TiersConfig.model_validate(cfg.model_dump() | {"job": job})
    except ValidationError as err:
        raise ConfigError(f"job id {job!r}: {err.errors()[0]['msg']}") from None


def parse_config(data: dict[str, Any], source: str = "config") -> TiersConfig:
    try:
        return TiersConfig.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ConfigError(f"{source}: {loc}: {first['msg']} (see docs/checkpoint.md for the "
                          f"tiers config format)") from None


def load_config(path: str | os.PathLike[str]) -> TiersConfig:
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"tiers config {p} does not exist; write one (docs/checkpoint.md) or "
                          f"omit --config to use the local-directory default")
    # Size cap, text only, YAML alias and depth budgets: the same reader as every spec file.
    text = read_text(p, "tiers config", error=ConfigError)
    if p.suffix == ".json":
        data = load_json(text, str(p), error=ConfigError)
    else:
        data = load_yaml_data(text, str(p), error=ConfigError)
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{p}: a tiers config is a mapping of keys (local_dir, region, ...), "
                          "not a list or a single value (see docs/checkpoint.md)")
    return parse_config(data or {}, str(p))


DEFAULT_REGIONS = ("us-east", "us-west")


def default_config(data_dir: str | os.PathLike[str],
                   regions: Sequence[str] = DEFAULT_REGIONS) -> TiersConfig:
    """The embedded default: every tier is a directory under the data dir. The region tier is
    the first of `regions` (the CLI passes the loaded fleet's regions), the others are its
    replicas; without a fleet, the seed fleet's two regions."""
    regions = list(regions) or list(DEFAULT_REGIONS)
    if "local" in regions:
        raise ConfigError("a fleet region named 'local' clashes with the local tier; write a "
                          "tiers config (docs/checkpoint.md) and pass it with --config")
    root = Path(data_dir) / "checkpoints"
    # The archive tier takes a name no region has (regions `archive` and `archive-tier` both
    # exist in some fleets: the next free `archive-tier-N`).
    archive = next(n for n in ("archive", "archive-tier",
                               *(f"archive-tier-{i}" for i in range(2, len(regions) + 3)))
                   if n not in regions)
    return TiersConfig(
        local_dir=str(root / "local"),
        region=StoreSpec(name=regions[0], kind="dir", path=str(root / regions[0])),
        replicas=[StoreSpec(name=r, kind="dir", path=str(root / r)) for r in regions[1:]],
        archive=StoreSpec(name=archive, kind="dir", path=str(root / archive)),
        chunk_size=1 * MiB, part_size=4 * MiB,
        retention=Retention(keep_local=2, keep_region=4, archive_every=2, keep_archived=4),
    )
