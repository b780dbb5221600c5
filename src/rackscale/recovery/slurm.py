"""`SlurmLauncher`: a supervised job's ranks as Slurm job steps, one `srun` per rank on the
node that holds its GPU, and an excluded part's node drained in Slurm.

Slots come from Slurm itself: every node `scontrol show node` lists that is up and not
drained, in name order, with one slot per GPU of its `Gres` (one slot on a node without GPUs:
a CPU node runs one rank). A node named after its tray (`region-rack-tray`, the fleet's
rule, `us-east-r01-c07`) gives its slots the GPUs' component ids (`us-east/r01/c07/gpu0`);
any other node name gives `slurm/<node>/c01/gpu<i>`. The first `--job-gpus` slots run the job
and the next `--spares` are its hot spares, so a spare is a GPU on another node.

An exclusion drains the node with a reason that starts with `rackscale: ` (lifecycle's
rule: only such drains are ever resumed by rackscale, an operator's own never is), so
Slurm places no later job there until the part is repaired. A rank is stopped with
`scancel` of its step's job (a killed `srun` alone would leave the task running on its
node), then its `srun` is killed.

Ranks and supervisor share the job directory (heartbeats, checkpoints' region tier when it
is a directory), as they do on a cluster with a shared file system.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rackscale.certify import Placement, RankPlace, gpu_gres, slurm_nodes
from rackscale.errors import UserError
from rackscale.lifecycle import REASON_PREFIX, ScontrolSlurm
from rackscale.recovery.launch import LaunchError, LocalLauncher, RankProcess

NVLINK, SCALEOUT = "nvlink", "scaleout"
_USABLE = ("IDLE", "MIXED", "ALLOCATED", "COMPLETING")
_PR_SET_PDEATHSIG = 1


def _term_with_parent() -> None:
    """In `srun` between fork and exec: SIGTERM when the supervisor dies. Unlike SIGKILL,
    srun gets to act on it: it signals its task and ends the job step, so the rank on its
    node does not outlive the supervisor."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def tray_of_node(node: str) -> str:
    """The tray component id a Slurm node stands for (inverse of the fleet's
    `slurm_node_name` for `region-rack-tray` names; the region may hold dashes)."""
    parts = node.rsplit("-", 2)
    return "/".join(parts) if len(parts) == 3 and all(parts) else f"slurm/{node}/c01"


def gpu_count(fields: Mapping[str, str]) -> int:
    """GPUs of a node from its `Gres` (`gpu:h200:8(S:0-1)`, `gpu:4`); 1 when it has none."""
    total = 0
    for item in fields.get("Gres", "").split(","):
        bits = item.split("(", 1)[0].split(":")
        if bits[0] == "gpu" and bits[-1].isdigit():
            total += int(bits[-1])
    return total or 1


class SlurmRankProcess(RankProcess):
    """The rank's `srun`; stopping it cancels its Slurm job first."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path, name: str,
                 env: Mapping[str, str]) -> None:
        super().__init__(proc, log)
        self.name, self.env = name, dict(env)

    def poll(self) -> int | None:
        """The task's exit code; a task killed by signal N (srun exits 128 + N, as a shell
        does) reads as -N, like a local process, so the detectors blame the killed rank
        rather than a peer whose collective then failed."""
        code = self.proc.poll()
        return -(code - 128) if code is not None and 128 < code < 160 else code

    def stopped(self) -> bool:
        return False  # the task's process is on its node; hangs are found by heartbeats

    def kill(self) -> None:
        if self.proc.poll() is None:
            ids = subprocess.run(["squeue", "-h", "-n", self.name, "-o", "%i"], env=self.env,
                                 capture_output=True, text=True, timeout=30, check=False)
            for job_id in ids.stdout.split():
                subprocess.run(["scancel", "--signal=KILL", "--full", job_id], env=self.env,
                               capture_output=True, timeout=30, check=False)
                subprocess.run(["scancel", job_id], env=self.env, capture_output=True,
                               timeout=30, check=False)
        super().kill()


class SlurmLauncher:
    """Ranks as `srun` job steps on the Slurm nodes that hold their GPUs."""

    name = "slurm"

    def __init__(self, *, env: Mapping[str, str] | None = None, partition: str | None = None,
                 immediate_s: int = 30) -> None:
        if shutil.which("srun") is None:
            raise LaunchError("srun is not installed (Slurm client). Fix: apt-get install -y "
                              "slurm-client, or use --runner local")
        self.env = dict(env or os.environ)
        self.partition, self.immediate_s = partition, immediate_s
        self.nodes = slurm_nodes(self.env)
        self.node_of: dict[str, str] = {}
        self.control = ScontrolSlurm(conf=self.env.get("SLURM_CONF"))

    def placement(self, slots: int) -> Placement:
        """The first `slots` GPU slots of the usable nodes (GPUs of one node together)."""
        ranks: dict[str, RankPlace] = {}
        usable = [n for n, f in sorted(self.nodes.items())
                  if f.get("State", "").split("+")[0] in _USABLE and "DRAIN" not in
                  f.get("State", "")]
        for node in usable:
            f = self.nodes[node]
            addr = f.get("NodeAddr") or node
            for i in range(gpu_count(f)):
                gpu = f"{tray_of_node(node)}/gpu{i}"
                self.node_of[gpu] = node
                ranks[gpu] = RankPlace(gpu=gpu, host=node, local_id=i, fabrics={
                    NVLINK: ("lo", "127.0.0.1"), SCALEOUT: ("", addr)})
                if len(ranks) == slots:
                    return Placement(ranks=ranks, shared_host=False,
                                     describe=f"Slurm nodes {', '.join(usable)}")
        raise UserError(f"Slurm has {len(ranks)} usable GPU slots on nodes "
                        f"{', '.join(usable) or '(none up and undrained)'}; --job-gpus + --spares "
                        f"need {slots}. Fix: resume or add nodes (`sinfo -R` shows drains), "
                        "or ask for fewer")

    def check(self, argv: Sequence[str]) -> None:
        LocalLauncher().check(argv)  # the job directory and programs are shared with nodes

    def start(self, place: RankPlace, argv: Sequence[str], env: Mapping[str, str],
              log: Path) -> RankProcess:
        log.parent.mkdir(parents=True, exist_ok=True)
        node = place.host or self.node_of[place.gpu]
        job = Path(env.get("RACKSCALE_JOB_DIR", "job")).name
        name = f"rackscale-{job}-a{env.get('RACKSCALE_ATTEMPT')}-r{env.get('RANK')}"
        cmd = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1",
               "--mem=8", f"--job-name={name}", "--kill-on-bad-exit=1",
               f"--immediate={self.immediate_s}", "--export=ALL"]
        if self.partition:
            cmd.append(f"--partition={self.partition}")
        if gpu_gres(self.nodes.get(node, {})):
            cmd.append("--gres=gpu:1")  # Slurm grants the GPU and sets CUDA_VISIBLE_DEVICES
        full_env = {**self.env, **env}
        with log.open("ab") as out:
            proc = subprocess.Popen([*cmd, *place.launch, *argv], env=full_env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_term_with_parent)
        return SlurmRankProcess(proc, log, name, full_env)

    def exclude(self, place: RankPlace, why: str) -> str:
        """Drain the part's node; returns the node. `rackscale: ` marks the drain as ours."""
        node = place.host or self.node_of[place.gpu]
        self.control.drain([node], f"{REASON_PREFIX}{why}")
        return node
