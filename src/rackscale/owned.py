"""The processes rackscale starts, recorded by id so that they can be found and stopped later.

Every process a job or soak starts (a supervisor, its ranks and standbys, a probe's agents, a
certification) is appended to a record file as it starts: one JSON line with its pid, its
start time in clock ticks (`/proc/<pid>/stat` field 22, which tells it from a later process
given the same pid) and its process group. The files a process records into are named by
`$RACKSCALE_PROCS` (several, separated by `os.pathsep`), which its children inherit: a job
records in its own directory, a soak in its output directory, and a process started under a
soak in both. What a record holds is the recorder's, and only that is ever stopped: by the
recorded ids, never by a name.

A process counts as one of the record's while it runs: the recorded process itself (same pid,
same start time) and every member of its process group. A rank started through a launch
prefix that forks (`sh -c ... CMD`) is the prefix's child, in the prefix's group, so it counts
even after the prefix is gone. (The kernel does not give a pid to a new process while a group
of that id has members, so a group whose leader is gone is still the recorded one.)
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

PROCS_ENV = "RACKSCALE_PROCS"
RECORD = "procs.jsonl"  # the record's file name in a job's or a soak's directory
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Owned:
    pid: int
    start_ticks: int
    pgid: int
    role: str
    group: bool  # it was started leading a process group of its own: its members count


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first); None when the
    process is gone or is a zombie (it runs nothing, and its parent reaps it)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def start_ticks(pid: int) -> int | None:
    f = _stat(pid)
    return int(f[19]) if f else None


def dir_identity(path: Path) -> str:
    """A directory's identity, device and inode: a copy of it has another."""
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


def record(pid: int, role: str, *, group: bool = True, files: str | None = None) -> None:
    """Append `pid` to each record file of `files` (default `$RACKSCALE_PROCS`; nothing when
    unset). Called right after the process started: its start time and group are read now.
    `group`: it was started in a session of its own, and what joins its group is its too (a
    process recording itself leads no group it made: a shell's pipeline is not its own)."""
    names = [n for n in (files if files is not None else os.environ.get(PROCS_ENV, ""))
             .split(os.pathsep) if n]
    f = _stat(pid)
    if not names or f is None:  # gone already: it left nothing to stop
        return
    entry = {"pid": pid, "start_ticks": int(f[19]), "pgid": int(f[2]), "role": role,
             "group": group and int(f[2]) == pid, "by": os.getpid(), "t": time.time()}
    for name in names:
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        # `home`: a copy of the directory holds lines of processes it does not own
        line = json.dumps({**entry, "home": dir_identity(path.parent)}) + "\n"
        # one short write with O_APPEND: lines of several recorders never interleave
        with path.open("a", encoding="utf-8") as out:
            out.write(line)


def add_record(path: Path) -> None:
    """This process and what it starts from now on record in `path` too (first)."""
    names = [n for n in os.environ.get(PROCS_ENV, "").split(os.pathsep) if n]
    if str(path) not in names:
        os.environ[PROCS_ENV] = os.pathsep.join([str(path), *names])


def recorded(path: Path) -> list[Owned]:
    """The record's entries; a line cut short (its writer killed mid-write) is skipped, and
    so is one written in another directory (this one is a copy: it is not theirs)."""
    try:
        text = path.read_text(encoding="utf-8")
        here = dir_identity(path.parent)
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            d = json.loads(line)
            if d.get("home", here) != here:
                continue
            out.append(Owned(pid=int(d["pid"]), start_ticks=int(d["start_ticks"]),
                             pgid=int(d["pgid"]), role=str(d["role"]),
                             group=bool(d.get("group", False))))
        except (ValueError, KeyError, TypeError):
            continue
    return out


def _groups() -> dict[int, list[int]]:
    """Every running process by its process group."""
    by: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            f = _stat(int(d.name))
            if f is not None:
                by.setdefault(int(f[2]), []).append(int(d.name))
    return by


def running(path: Path, *, spare: frozenset[int] = frozenset()) -> dict[int, str]:
    """The record's processes that still run, pid -> role (a group member not recorded
    itself: its leader's role); the pids in `spare` (this process and its parents) are
    not counted."""
    groups = _groups()
    out: dict[int, str] = {}
    for o in recorded(path):
        ticks = start_ticks(o.pid)
        if ticks == o.start_ticks:
            out.setdefault(o.pid, o.role)
        if not o.group:  # a group it does not lead, or did not make: not its own
            continue
        if ticks is None or ticks == o.start_ticks:  # the leader, or its group left behind
            for member in groups.get(o.pgid, []):
                out.setdefault(member, o.role)
    return {p: r for p, r in out.items() if p not in spare}


def ancestry() -> frozenset[int]:
    """This process and every parent up to init: never stopped by a reap."""
    pids, pid = {os.getpid()}, os.getppid()
    while pid > 1:
        pids.add(pid)
        f = _stat(pid)
        pid = int(f[1]) if f else 0
    return frozenset(pids)


def reap(path: Path, timeout_s: float = 10.0) -> dict[int, str]:
    """SIGKILL every process of the record that still runs (not this one or its parents),
    and wait up to `timeout_s` for them to go; returns those left (pid -> role)."""
    spare = ancestry()
    left = running(path, spare=spare)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p: r for p, r in running(path, spare=spare).items() if p in left}
    return left


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A `preexec_fn`: the child gets `sig` when the process (the thread) that started it
    ends, even by SIGKILL; it leaves at once if that happened already (the race between fork
    and prctl)."""
    parent = os.getpid()

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def die_with_own_parent() -> None:
    """For a process whose starter is a launch prefix (`sh -c`, which forks it): SIGKILL when
    that prefix ends, as the prefix itself gets when its starter does. A prefix gone before
    this call is not seen here (the process is then init's): the record's reap finds it."""
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getppid()
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class Ended(SystemExit):
    """SIGTERM or SIGHUP: the command unwinds as on Ctrl-C, through its clean-up."""


@contextlib.contextmanager
def ends_cleanly() -> Iterator[None]:
    """SIGTERM and SIGHUP end the command through its `finally` blocks (Python's default
    would end it on the spot, leaving what it started running); SIGINT already does."""
    def end(signum: int, _frame: FrameType | None) -> None:
        raise Ended(128 + signum)

    old = {s: signal.signal(s, end) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
