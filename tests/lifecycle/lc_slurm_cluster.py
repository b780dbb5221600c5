"""A real Slurm cluster on this machine for tests: munged, one slurmctld and one `slurmd -N`
per emulated node, all in a temp directory with free ports; stopped (by pid) afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(cond, timeout: float, what: str, logs: list[Path]) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    tails = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in logs if p.exists())
    raise TimeoutError(f"{what} not ready within {timeout} s\n{tails}")


def available() -> str | None:
    for exe in ("munged", "slurmctld", "slurmd", "scontrol"):
        if shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
            return f"{exe} not installed (slurm-wlm, munge)"
    if os.geteuid() != 0:
        return "emulated slurmd nodes need root"
    return None


@contextmanager
def slurm_cluster(root: Path, nodes: list[str], cpus: int = 1,
                  extra: list[str] | None = None) -> Iterator[Path]:
    """Yields the slurm.conf path; every node (`cpus` CPUs) is up and idle when it yields.
    `extra`: further slurm.conf lines (a TopologyPlugin, a HealthCheckProgram); files they
    name beside slurm.conf (topology.conf) are the caller's to write into `root` first."""
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o755)
    procs: list[subprocess.Popen] = []
    key = root / "munge.key"
    # A key of the cluster's own: the test needs no host-wide munge setup.
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    sock = root / "munge.sock"
    logs = [root / "munged.log", root / "slurmctld.log"]
    procs.append(subprocess.Popen(
        ["munged", "-F", "-f", f"--socket={sock}", f"--key-file={key}",
         f"--pid-file={root / 'munged.pid'}", f"--seed-file={root / 'munged.seed'}",
         f"--log-file={root / 'munged.log'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
    host = socket.gethostname().split(".")[0]
    ctl_port = free_port()
    node_ports = [free_port() for _ in nodes]
    (root / "state").mkdir(exist_ok=True)
    (root / "spool").mkdir(exist_ok=True)
    conf = root / "slurm.conf"
    lines = [
        "ClusterName=rackscale-test", f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctl_port}", "AuthType=auth/munge", "CredType=cred/munge",
        f"AuthInfo=socket={sock}", "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}/%n",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "ReturnToService=2", "MpiDefault=none",
        "JobCompType=jobcomp/none", "AccountingStorageType=accounting_storage/none",
        "SlurmctldTimeout=30", "SlurmdTimeout=30", *(extra or []),
    ]
    for n, p in zip(nodes, node_ports, strict=True):
        lines.append(f"NodeName={n} NodeHostname={host} NodeAddr=127.0.0.1 Port={p} CPUs={cpus} "
                     f"RealMemory=64 Feature=rackscale State=UNKNOWN")
    lines.append("PartitionName=test Nodes=ALL Default=YES State=UP MaxTime=INFINITE")
    conf.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, SLURM_CONF=str(conf))
    try:
        _wait(sock.exists, 15, "munged", logs)
        procs.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", str(conf)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))
        for n in nodes:
            logs.append(root / f"slurmd-{n}.log")
            procs.append(subprocess.Popen(["slurmd", "-D", "-N", n, "-f", str(conf)], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT))

        def all_idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env=env,
                                 capture_output=True, text=True, check=False).stdout
            states = dict(line.split() for line in out.splitlines() if line.strip())
            return len(states) == len(nodes) and all(s == "idle" for s in states.values())

        _wait(all_idle, 60, "slurm nodes idle", logs)
        yield conf
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
