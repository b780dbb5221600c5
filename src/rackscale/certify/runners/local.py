"""`LocalRunner`: every rank an agent process on this host, placed as its `Placement` says
(a plain process on the loopback, or inside its lab network namespace and cgroup)."""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from rackscale.certify.runners import fabric_env
from rackscale.certify.runners.agents import AgentPool, Job, results
from rackscale.certify.runners.base import (
    NVLINK,
    SCALEOUT,
    Placement,
    Result,
    RunnerError,
)

DEFAULT_CONCURRENCY = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class CollectivePlanner:
    """Per-member commands of one all-reduce: who hosts the store, which interface each rank
    binds, and the hierarchical layout when NVLink is on across domains."""

    def __init__(self, placement: Placement, domain_of: Mapping[str, str], *,
                 iters: int, warmup: int, timeout_s: float) -> None:
        self.placement = placement
        self.domain_of = domain_of
        self.iters, self.warmup, self.timeout_s = iters, warmup, timeout_s
        self._ports = itertools.count(random.randint(20000, 40000))
        self._tags = itertools.count()

    def port(self) -> int:
        if self.placement.shared_host:
            return free_port()
        return 20000 + next(self._ports) % 40000

    def commands(self, members: Sequence[str], nbytes: int, nvlink: bool,
                 ) -> dict[str, dict[str, Any]]:
        places = [self.placement.place(g) for g in members]
        domains = [self.domain_of[g] for g in members]
        one_domain = len(set(domains)) == 1
        fabric = NVLINK if nvlink and one_domain else SCALEOUT
        for p in places:
            if fabric not in p.fabrics or SCALEOUT not in p.fabrics:
                raise RunnerError(f"{p.gpu} has no {fabric} interface in its placement")
        base = {"op": "allreduce", "tag": f"t{next(self._tags)}", "world": len(members),
                "store_host": places[0].fabrics[fabric][1], "store_port": self.port(),
                "nbytes": nbytes, "iters": self.iters, "warmup": self.warmup,
                "timeout_s": self.timeout_s, "env": fabric_env.collective_env(nvlink)}
        out: dict[str, dict[str, Any]] = {}
        hier = nvlink and not one_domain
        order = sorted(set(domains), key=domains.index)
        by_dom = {d: [g for g, dd in zip(members, domains, strict=True) if dd == d]
                  for d in order}
        chunks = min(len(v) for v in by_dom.values())
        for rank, (g, p, d) in enumerate(zip(members, places, domains, strict=True)):
            cmd = base | {"rank": rank, "iface": p.fabrics[fabric][0]}
            if hier:
                local = by_dom[d].index(g)
                cmd["hier"] = {"domain": order.index(d), "local": local,
                               "domain_size": len(by_dom[d]), "chunks": chunks,
                               "cross_rank": order.index(d), "cross_size": len(order),
                               "nv_iface": p.fabrics[NVLINK][0],
                               "so_iface": p.fabrics[SCALEOUT][0]}
            out[g] = cmd
        return out


def collective_fields(replies: list[dict[str, Any]]) -> dict[str, Any]:
    # a collective runs at the pace of its slowest rank
    return {"seconds": max(float(r["seconds"]) for r in replies),
            "result_ok": all(bool(r["result_ok"]) for r in replies)}


class LocalRunner:
    """Ranks as processes on this host. Disjoint groups of a batch run at once: at most
    `concurrency` groups and `max_ranks` ranks (default: as many ranks as their CPU shares
    fit in this host's cores, so every rank gets its share and figures measure links)."""

    name = "local"

    def __init__(self, placement: Placement, domain_of: Mapping[str, str], *,
                 concurrency: int = DEFAULT_CONCURRENCY, max_ranks: int | None = None,
                 iters: int = 3, warmup: int = 1, timeout_s: float = 6.0) -> None:
        if concurrency < 1 or (max_ranks is not None and max_ranks < 1):
            raise RunnerError(f"concurrency={concurrency}, max_ranks={max_ranks}: use 1 or "
                              "more")
        self.placement = placement
        self.concurrency = concurrency
        if max_ranks is None:
            shares = [p.nominal_cpu for p in placement.ranks.values() if p.nominal_cpu]
            max_ranks = max(2, int((os.cpu_count() or 2) / max(shares))) if shares else None
        self.max_ranks = max_ranks
        self.timeout_s = timeout_s
        self.planner = CollectivePlanner(placement, domain_of, iters=iters, warmup=warmup,
                                         timeout_s=timeout_s)
        self.pool = AgentPool(placement, lambda g: list(placement.place(g).launch))

    def per_rank(self, op: dict[str, Any], gpus: Sequence[str]) -> list[Result]:
        jobs = [Job({g: op}, self.timeout_s * 3) for g in gpus]
        self.pool.run(jobs, self.concurrency, self.max_ranks)
        return results(jobs, lambda r: dict(r[0]))

    def collectives(self, groups: Sequence[Sequence[str]], nbytes: int, nvlink: bool,
                    ) -> list[Result]:
        jobs = [Job(self.planner.commands(g, nbytes, nvlink), self.timeout_s * 2)
                for g in groups]
        self.pool.run(jobs, self.concurrency, self.max_ranks)
        return results(jobs, collective_fields)

    def close(self) -> None:
        self.pool.close()
