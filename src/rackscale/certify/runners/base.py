"""The runner seam: where each GPU's rank runs, and how a batch of tests is spread over them.

A `Placement` says, per GPU component id, how to start its rank (a command prefix: nothing on
this host, `ip netns exec` into a lab namespace, `srun -w node`) and which interface and
address it has on each fabric (NVLink, scale-out). A `Runner` starts one agent per GPU, runs
per-rank work and collectives on groups of GPUs (disjoint groups of one batch at once, up to
its concurrency limit) and gathers the answers; a rank that cannot start or a test that fails
or times out is an error of that element, never a hang. `RunnerBackend` is the ladder's
`Backend` on top of any runner, so probes and stages never learn where they run.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from rackscale.errors import UserError

NVLINK, SCALEOUT = "nvlink", "scaleout"


class RunnerError(UserError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPlace:
    """Where one GPU's rank runs."""

    gpu: str
    launch: tuple[str, ...] = ()  # prefix of the agent's command line
    fabrics: dict[str, tuple[str, str]] = field(default_factory=dict)  # fabric: (iface, addr)
    host: str | None = None  # Slurm node name, when placed by Slurm
    local_id: int = 0  # the rank's index on its host
    nominal_cpu: float | None = None  # cores its cgroup grants when healthy (lab)

    def __post_init__(self) -> None:
        for fab in self.fabrics:
            if fab not in (NVLINK, SCALEOUT):
                raise RunnerError(f"placement of {self.gpu}: unknown fabric {fab!r}; "
                                  f"valid: {NVLINK}, {SCALEOUT}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Placement:
    """Every GPU's place; `shared_host` = all ranks share one network namespace (ports must
    then be unique host-wide)."""

    ranks: dict[str, RankPlace]
    shared_host: bool = False
    describe: str = ""

    def place(self, gpu: str) -> RankPlace:
        try:
            return self.ranks[gpu]
        except KeyError:
            raise RunnerError(f"{gpu} has no place in this runner's placement "
                              f"({self.describe}); placed: {len(self.ranks)} GPUs") from None


def host_rank_cap(placement: Placement, cores: int | None = None) -> int | None:
    """How many ranks of `placement` may run at once when they all share this host's cores:
    as many as their CPU shares fit (at least 2, one collective). None when the ranks state
    no share (a plain process each: the host's scheduler decides). A ring waits for its
    slowest rank at every step, so ranks that queue for a core measure the host, not links."""
    shares = [p.nominal_cpu for p in placement.ranks.values() if p.nominal_cpu]
    if not shares:
        return None
    return max(2, int((cores or os.cpu_count() or 2) / max(shares)))


def loopback_placement(gpus: Sequence[str]) -> Placement:
    """Every rank a plain process on this host, both fabrics over the loopback."""
    lo = ("lo", "127.0.0.1")
    return Placement(ranks={g: RankPlace(gpu=g, fabrics={NVLINK: lo, SCALEOUT: lo},
                                         local_id=i) for i, g in enumerate(gpus)},
                     shared_host=True, describe="processes on this host (loopback)")


@dataclass(frozen=True, slots=True)
class Result:
    """The answer of one element (a rank or a group): fields of the agent's reply or an error."""

    ok: bool
    values: dict[str, Any]
    error: str | None = None


class Runner(Protocol):
    name: str
    placement: Placement
    concurrency: int

    def per_rank(self, op: dict[str, Any], gpus: Sequence[str]) -> list[Result]:
        """Run `op` on each GPU's rank (up to `concurrency` at once)."""

    def collectives(self, groups: Sequence[Sequence[str]], nbytes: int, nvlink: bool,
                    ) -> list[Result]:
        """One all-reduce per group (groups disjoint; up to `concurrency` at once)."""

    def close(self) -> None:
        """Stop every agent this runner started."""


def placement_from_places(places: dict[str, dict[str, Any]], describe: str) -> Placement:
    """A placement from plain data: {gpu: {"launch": [...], "fabrics": {fabric: [iface,
    addr]}, "nominal_cpu": cores, "host": node, "local_id": k}} (what the lab hands out)."""
    return Placement(ranks={g: RankPlace(
        gpu=g, launch=tuple(p.get("launch", ())),
        fabrics={f: (str(v[0]), str(v[1])) for f, v in p.get("fabrics", {}).items()},
        host=p.get("host"), local_id=int(p.get("local_id", 0)),
        nominal_cpu=p.get("nominal_cpu")) for g, p in places.items()}, describe=describe)
