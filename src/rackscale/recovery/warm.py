"""Warm standby ranks: for a command that supports it (`rackscale job train-demo` does), the
supervisor keeps one process per GPU slot started ahead of need, past its interpreter start
and imports, waiting for its rank. A restart then hands each new rank to a waiting process
instead of starting one, which takes the process start-up (seconds for torch) off the
recovery's critical path.

The protocol: a standby process is started with `RACKSCALE_WARM=<file>`; once ready it writes
`<file>.ready`; its rank's environment arrives as JSON in `<file>` (written atomically); it
then runs as if started with that environment. Standbys die with the supervisor like ranks.

Standbys are on by default, so a command must be known to take part before any is started:
a command that does not would run whole, as no rank, in every standby. rackscale's own
trainer is known (`takes_part`), and its standbys start with the job's first ranks. Any
other command says it through the call a standby waits in (`wait_for_rank`): a rank started
the ordinary way that reaches it writes `warm/supported` in the job directory, and the pool
starts standbys from then on (a fault before they are ready restarts those ranks afresh). A
command that never calls it gets none, and the supervisor says so once its ranks step.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from rackscale import owned
from rackscale.certify import Placement
from rackscale.durable import write_atomic
from rackscale.recovery.launch import Launcher, RankProcess, stop_all

WARM_ENV = "RACKSCALE_WARM"
# Set by the lab's launch prefix: the slot's cgroups, which a standby joins with its rank
RANK_CGROUPS_ENV = "RACKSCALE_RANK_CGROUPS"
SUPPORTED = "supported"  # in the pool's directory: a rank of the command called wait_for_rank


def _no_note(message: str) -> None:
    pass


def takes_part(command: Sequence[str]) -> bool:
    """Whether `command` is rackscale's reference trainer, which calls `wait_for_rank`:
    `rackscale job train-demo`, `PYTHON -m rackscale job train-demo`, or `PYTHON -m
    rackscale.recovery.trainer` (options after those words are the trainer's)."""
    argv = list(command)
    name = Path(argv[0]).name
    if name == "rackscale":
        rest = argv[1:]
    elif not name.startswith("python"):  # another launcher (torchrun) runs it its own way
        return False
    elif argv[1:3] == ["-m", "rackscale"]:
        rest = argv[3:]
    else:
        return argv[1:3] == ["-m", "rackscale.recovery.trainer"]
    return rest[:2] == ["job", "train-demo"]


def wait_for_rank(poll_s: float = 0.01) -> None:
    """The command's side: when started as a standby, say so and wait for the rank's
    environment (bounded by the supervisor's life: the process dies with it)."""
    path = os.environ.get(WARM_ENV)
    if not path:
        job_dir = os.environ.get("RACKSCALE_JOB_DIR")
        if job_dir:  # a supervised rank: the command can be started as a standby
            mark = Path(job_dir) / "warm" / SUPPORTED
            if not mark.exists():
                write_atomic(mark, str(os.getpid()), sync=False)
        return
    # Started through a launch prefix that forks (the lab's `sh -c`), a standby is the
    # prefix's child, not the supervisor's: it dies with the prefix, as the prefix dies with
    # the supervisor, or a supervisor killed with -9 would leave it waiting here for ever.
    owned.die_with_own_parent()
    go = Path(path)
    dirs = os.environ.pop(RANK_CGROUPS_ENV, "")
    if dirs:  # the pool moves this process there when it hands the rank over (see take)
        write_atomic(go.with_suffix(".cgroups"), dirs, sync=False)
    write_atomic(go.with_suffix(".ready"), str(os.getpid()), sync=False)
    while not go.exists():
        time.sleep(poll_s)
    env = json.loads(go.read_text(encoding="utf-8"))
    os.environ.update({str(k): str(v) for k, v in env.items()})
    del os.environ[WARM_ENV]


class WarmPool:
    """One standby process per slot, started by the launcher like a rank, once the command
    has shown that it takes part (see the module's doc)."""

    def __init__(self, launcher: Launcher, placement: Placement, command: Sequence[str],
                 job_dir: Path, note: Callable[[str], None] = _no_note) -> None:
        self.launcher, self.placement, self.command = launcher, placement, command
        self.dir = job_dir / "warm"
        self.note = note
        self.standby: dict[str, tuple[RankProcess, Path]] = {}
        self._ids = itertools.count()
        self._wanted: list[str] = []  # slots to fill once the command is known to take part
        self._supported = takes_part(command)
        self._said = False

    def supported(self) -> bool:
        """A rank of the command has said it takes standbys (kept: the command is fixed)."""
        if not self._supported:
            self._supported = (self.dir / SUPPORTED).exists()
        return self._supported

    def refill(self, slots: Sequence[str]) -> None:
        """A standby on each of `slots` that lacks a live one; deferred to `tick` until the
        command is known to take part."""
        if not self.supported():
            # None once the job's ranks stepped without saying: then they never will
            self._wanted = [] if self._said else list(slots)
            return
        self._wanted = []
        self._start(slots)

    def tick(self, stepped: bool) -> None:
        """Called as the job runs: start the deferred standbys once a rank has said the
        command takes them; once a rank has done a step without that, say the job runs
        without (a supporting rank says it before its first step)."""
        if self._wanted and self.supported():
            self.refill(self._wanted)
        elif stepped and not self._said and not self.supported():
            self._said, self._wanted = True, []
            self.note(f"no standby processes for this job: its command ({self.command[0]} "
                      "...) never called rackscale.recovery.wait_for_rank(), so a restart "
                      "starts each rank afresh (see docs/recovery.md, warm standbys)")

    def _start(self, slots: Sequence[str]) -> None:
        for slot in slots:
            got = self.standby.get(slot)
            if got is not None and got[0].poll() is None:
                continue
            n = next(self._ids)
            go = self.dir / f"w{n:04d}.json"
            log = self.dir / f"w{n:04d}.log"
            self.dir.mkdir(parents=True, exist_ok=True)
            proc = self.launcher.start(self.placement.place(slot), self.command,
                                       {WARM_ENV: str(go)}, log)
            owned.record(proc.pid, "standby")
            self.standby[slot] = (proc, go)

    def take(self, slot: str, env: Mapping[str, str]) -> RankProcess | None:
        """The slot's standby with `env` handed over, or None when none is ready yet."""
        got = self.standby.get(slot)
        if got is None:
            return None
        proc, go = got
        ready = go.with_suffix(".ready")
        if proc.poll() is not None or not ready.exists():
            return None
        del self.standby[slot]
        if not _join_rank_cgroups(go.with_suffix(".cgroups"), int(ready.read_text())):
            stop_all([proc], 5.0)
            return None  # started afresh there, the rank fails as any would
        write_atomic(go, json.dumps(dict(env)), sync=False)
        return proc

    def close(self, timeout_s: float) -> None:
        stop_all([p for p, _ in self.standby.values()], timeout_s)
        self.standby.clear()


def _join_rank_cgroups(listed: Path, pid: int) -> bool:
    """A lab standby waits outside its slot's cgroups (the slot's CPU quota stands for its
    GPU, which a waiting process does not use) and names them (`listed`); it is moved in
    as its rank arrives, by this process (inside its network namespace the standby sees the
    namespace's /sys, not the host's cgroups). False when the slot admits no process (its
    GPU is dead): the standby is not used, and a fresh start there fails as the lab makes
    it. No file: the standby already runs where its rank would."""
    if not listed.exists():
        return True
    dirs = [Path(d) for d in listed.read_text(encoding="utf-8").split()]
    for d in dirs:
        limit = d / "pids.max"
        if limit.exists() and limit.read_text().strip() == "0":
            return False
    for d in dirs:
        (d / "cgroup.procs").write_text(str(pid))
    return True
