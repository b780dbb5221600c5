"""`SlurmRunner`: every rank a Slurm task on the node that holds its GPU, through `srun`.

Fleet-to-Slurm mapping: one Slurm node per tray (HGX: per node), named after the tray's
component id with "/" as "-" (`lab/r01/c02` -> `lab-r01-c02`), holding that tray's GPUs; it
is checked against `scontrol show node` before anything runs. Each rank is one `srun -w NODE
-n1` job step that keeps the rank's agent for the campaign (stdin/stdout carry its commands),
so the scheduler places and accounts every rank, and a partition and a concurrency limit
apply. A rank whose job cannot start (node down or drained, partition unknown, queued past the
start timeout) or dies, and a test that times out, become an error of that group, with the
Slurm reason (`squeue`/`scontrol`), never a hang.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from rackscale.certify.runners.agents import AgentPool, AgentProc, Job, results
from rackscale.certify.runners.base import (
    Placement,
    RankPlace,
    Result,
    RunnerError,
    host_rank_cap,
)
from rackscale.certify.runners.local import CollectivePlanner, collective_fields
from rackscale.fleet import Topology, slurm_node_name

DEFAULT_CONCURRENCY = 3


def _slurm(argv: list[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=30,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RunnerError(f"`{' '.join(argv)}` did not answer in 30 s: is slurmctld up?") \
            from None


def slurm_nodes(env: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Every node `scontrol show node -o` knows, with its fields (State, CPUs, ...)."""
    p = _slurm(["scontrol", "show", "node", "-o"], env)
    if p.returncode != 0:
        raise RunnerError(f"scontrol show node failed: {p.stderr.strip()[-300:]}. Fix: point "
                          "SLURM_CONF at the cluster's slurm.conf")
    nodes = {}
    for line in p.stdout.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "NodeName" in fields:
            nodes[fields["NodeName"]] = fields
    return nodes


def on_this_host(node: Mapping[str, str]) -> bool:
    """Whether a node of `scontrol show node` runs on this machine (its address is a
    loopback one, or its host name is this machine's)."""
    addr = node.get("NodeAddr", "")
    host = node.get("NodeHostName", "")
    return addr.startswith("127.") or addr == "::1" or host in (
        "localhost", socket.gethostname())


def gpu_gres(fields: Mapping[str, str]) -> bool:
    """Whether a node (fields of `scontrol show node -o`) has GPUs as a generic resource,
    e.g. `Gres=gpu:h200:8(S:0-1)`; `(null)` when it has none."""
    return any(item.split(":", 1)[0] == "gpu" for item in
               fields.get("Gres", "").split(","))


class SlurmRunner:
    """Ranks as Slurm tasks (srun) on the nodes holding their GPUs."""

    name = "slurm"

    def __init__(self, placement: Placement, domain_of: Mapping[str, str], *,
                 node_of: Mapping[str, str], env: Mapping[str, str] | None = None,
                 partition: str | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                 iters: int = 3, warmup: int = 1, timeout_s: float = 6.0,
                 immediate_s: int = 20, gres: str | None = None,
                 max_ranks: int | None = None) -> None:
        if concurrency < 1 or (max_ranks is not None and max_ranks < 1):
            raise RunnerError(f"concurrency={concurrency}, max_ranks={max_ranks}: use 1 or "
                              "more")
        self.max_ranks = max_ranks
        self.env = dict(env or os.environ)
        self.placement = placement
        self.concurrency = concurrency
        self.partition = partition
        self.node_of = dict(node_of)
        self.timeout_s = timeout_s
        self.immediate_s = immediate_s  # a rank's job not running by then fails (srun -I)
        # GPU nodes: each rank's step asks for one GPU, so Slurm grants it (device cgroup) and
        # sets CUDA_VISIBLE_DEVICES; which of the node's GPUs it grants is Slurm's choice
        self.gres = gres
        self.planner = CollectivePlanner(placement, domain_of, iters=iters, warmup=warmup,
                                         timeout_s=timeout_s)
        self.pool = AgentPool(placement, self._argv, self._explain)

    @classmethod
    def from_environment(cls, topo: Topology, placement: Placement | None,
                         domain_of: Mapping[str, str], *, concurrency: int,
                         partition: str | None) -> SlurmRunner:
        """Map every GPU's tray to its Slurm node and check the nodes exist (SLURM_CONF)."""
        if shutil.which("srun") is None:
            raise RunnerError("srun is not installed (Slurm client). Fix: apt-get install -y "
                              "slurm-client, or use --runner local")
        env = dict(os.environ)
        known = slurm_nodes(env)
        node_of = {g: slurm_node_name(tray) for g, tray in topo.tray_of_gpus().items()}
        missing = sorted(set(node_of.values()) - set(known))
        if missing:
            raise RunnerError(f"Slurm knows no node {', '.join(missing[:4])}"
                              f"{' ...' if len(missing) > 4 else ''}: one node per tray is "
                              f"expected (known: {', '.join(sorted(known)[:6])}). Fix: add "
                              "them to slurm.conf")
        if placement is None:
            lo = ("lo", "127.0.0.1")
            placement = Placement(ranks={g: RankPlace(
                gpu=g, host=node_of[g], fabrics={"nvlink": lo, "scaleout": lo})
                for g in topo.gpu_ids}, shared_host=True, describe="Slurm nodes (loopback)")
        gpus = any(gpu_gres(known[n]) for n in set(node_of.values()))
        # Slurm nodes that all live on this machine (the lab: one slurmd per tray) share its
        # cores, whatever CPUs slurm.conf states: cap ranks in flight as LocalRunner does.
        on_here = all(on_this_host(known[n]) for n in set(node_of.values()))
        return cls(placement, domain_of, node_of=node_of, env=env, partition=partition,
                   concurrency=concurrency, gres="gpu:1" if gpus else None,
                   max_ranks=host_rank_cap(placement) if on_here else None)

    def _argv(self, gpu: str) -> list[str]:
        node = self.node_of[gpu]
        # one CPU and a token of memory per rank: a node holds as many ranks as it has GPUs
        argv = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
                "--mem=8", "--unbuffered",
                f"--job-name=rackscale-{gpu.replace('/', '-')}", "--kill-on-bad-exit=1",
                f"--immediate={self.immediate_s}"]
        if self.partition:
            argv.append(f"--partition={self.partition}")
        if self.gres:
            argv.append(f"--gres={self.gres}")
        return [*argv, *self.placement.place(gpu).launch]

    def _explain(self, base: str, agent: AgentProc) -> str:
        """Add what Slurm says about the rank's job: its state and reason."""
        name = f"rackscale-{agent.gpu.replace('/', '-')}"
        p = _slurm(["squeue", "-h", "-n", name, "-o", "%i %T %r"], self.env)
        queued = p.stdout.strip().splitlines()
        node = self.node_of[agent.gpu]
        n = _slurm(["scontrol", "show", "node", node, "-o"], self.env).stdout
        state = dict(re.findall(r"(\w+)=(\S*)", n))
        why = f"Slurm: node {node} {state.get('State', '?')}"
        if state.get("Reason"):
            why += f" ({state['Reason']})"
        if queued:
            why += f"; job {queued[0]}"
        return f"{base}; {why}"

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
