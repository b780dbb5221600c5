"""The launch seam: how one rank of a job starts on its slot's host, and how it is stopped.

A slot is a GPU's component id with its place (`certify.runners.RankPlace`: a launch prefix
such as `ip netns exec` into a lab namespace or `srun -w node`). `LocalLauncher` starts the
rank as a child process in its own process group, with the kernel told to kill it when the
supervisor dies (PR_SET_PDEATHSIG): a supervisor killed with -9 leaves no orphan ranks.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from rackscale import owned
from rackscale.certify import RankPlace
from rackscale.errors import UserError


class LaunchError(UserError):
    pass


class RankProcess:
    """One started rank: its pid (and process group), exit code, and whether it is stopped."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc, self.log = proc, log
        self.pid = proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def stopped(self) -> bool:
        """The OS reports the process stopped (SIGSTOP, a debugger): direct evidence of a hang."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def kill(self) -> None:
        """SIGKILL the rank's whole process group (it leads its own), then reap it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)

    def wait(self, timeout_s: float) -> int | None:
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None


class Launcher(Protocol):
    name: str

    def check(self, argv: Sequence[str]) -> None:
        """Raise LaunchError when `argv` cannot start (before any rank is launched)."""

    def start(self, place: RankPlace, argv: Sequence[str], env: Mapping[str, str],
              log: Path) -> RankProcess:
        """Start one rank of `argv` on `place` with `env` added to the environment."""


@runtime_checkable
class Excluder(Protocol):
    """A launcher whose scheduler can take a part out of service (Slurm: drain its node)."""

    def exclude(self, place: RankPlace, why: str) -> str:
        """Keep later jobs off `place`'s host; returns what was excluded (the node)."""


def master_addr(place: RankPlace) -> str:
    """Where the other ranks reach rank 0: its scale-out address (loopback on one host)."""
    return place.fabrics.get("scaleout", ("", "127.0.0.1"))[1] or "127.0.0.1"


class LocalLauncher:
    """Ranks as processes on this host (or in the lab's namespaces, by the place's prefix)."""

    name = "local"

    def check(self, argv: Sequence[str]) -> None:
        exe = argv[0]
        found = shutil.which(exe) if os.sep not in exe else (exe if os.access(exe, os.X_OK)
                                                             else None)
        if found is None:
            raise LaunchError(f"command {exe!r} was not found or is not executable (PATH="
                              f"{os.environ.get('PATH', '')}); give an existing program after "
                              "`--`, e.g. `-- rackscale job train-demo`")

    def start(self, place: RankPlace, argv: Sequence[str], env: Mapping[str, str],
              log: Path) -> RankProcess:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [*place.launch, *argv], env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=owned.die_with_parent())
        return RankProcess(proc, log)


def stop_all(procs: Sequence[RankProcess], timeout_s: float) -> list[int]:
    """Kill every rank and wait for each; returns the pids that did not go (a bug to report)."""
    for p in procs:
        p.kill()
    deadline = time.monotonic() + timeout_s
    left = []
    for p in procs:
        if p.wait(max(0.0, deadline - time.monotonic())) is None:
            left.append(p.pid)
    return left
