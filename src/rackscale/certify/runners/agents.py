"""Long-lived rank agents and the scheduler that runs jobs (a command per member GPU) on them.

Both runners use this: they differ only in how an agent is started (its launch prefix) and in
what they can say when one dies. A job's members are sent their commands together; the job is
done when every member answered, failed when one answered an error, died, or the job's
deadline passed (its agents are then killed and restarted on next use, so a hung collective
never blocks the campaign).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale import owned
from rackscale.certify.runners.base import Placement, Result

AGENT = str(Path(__file__).with_name("agent.py"))
START_TIMEOUT_S = 120.0  # torch import on a busy 2-core host, many ranks at once


class AgentProc:
    """One agent process and the buffered end of its stdout pipe."""

    def __init__(self, gpu: str, argv: list[str], env: dict[str, str]) -> None:
        self.gpu = gpu
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in stop())
        # killed with the process that started it (a supervisor's probe, a certification),
        # however that ends: an agent may sit in a collective, deaf to its closed stdin
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, start_new_session=True,
                                     preexec_fn=owned.die_with_parent())
        owned.record(self.proc.pid, "agent")
        self.buf = b""
        self.ready = False
        self.dist = "gloo"  # the agent's collective backend, from its ready line
        self.dead_reason: str | None = None

    @property
    def fd(self) -> int:
        assert self.proc.stdout is not None
        return self.proc.stdout.fileno()

    def send(self, obj: dict[str, Any]) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(obj) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def lines(self) -> list[dict[str, Any]] | None:
        """Whole lines now readable; None at end of file (the agent exited)."""
        chunk = os.read(self.fd, 65536)
        if not chunk:
            return None
        self.buf += chunk
        out = []
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a library printing to stdout; agent answers are JSON
        return out

    def stderr_tail(self) -> str:
        try:
            self.log.seek(0)
            return self.log.read()[-600:].strip()
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send({"op": "exit"})
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@dataclass(slots=True)
class Job:
    """Commands for the members of one test; finished when all answered (or one failed)."""

    commands: dict[str, dict[str, Any]]  # gpu -> command
    timeout_s: float
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str | None = None
    deadline: float = 0.0


class AgentPool:
    """One agent per GPU, started on first use through `argv_for(gpu)`."""

    def __init__(self, placement: Placement, argv_for: Callable[[str], list[str]],
                 explain: Callable[[str, AgentProc], str] | None = None) -> None:
        self.placement = placement
        self.argv_for = argv_for
        self.explain = explain
        self.agents: dict[str, AgentProc] = {}
        self.started = 0

    def ensure(self, gpus: Sequence[str]) -> None:
        """Start the agents `gpus` lack (all at once) and wait for each to be ready or dead."""
        new = []
        for g in gpus:
            a = self.agents.get(g)
            if a is None or (a.proc.poll() is not None and a.dead_reason is None):
                if a is not None:
                    a.log.close()
                # the local id picks the rank's GPU on a CUDA host (the agent's device)
                env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                                    "RACKSCALE_LOCAL_ID": str(self.placement.place(g).local_id)}
                self.agents[g] = AgentProc(g, [*self.argv_for(g), sys.executable, AGENT], env)
                self.started += 1
                new.append(self.agents[g])
        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = {a.fd: a for a in new}
        while waiting and time.monotonic() < deadline:
            ready, _, _ = select.select(list(waiting), [], [], 0.5)
            for fd in ready:
                a = waiting[fd]
                got = a.lines()
                if got is None:
                    a.proc.wait(timeout=10)
                    a.dead_reason = self._why_dead(a, f"exited {a.proc.returncode} at start")
                    del waiting[fd]
                elif any(x.get("ready") for x in got):
                    a.ready = True
                    a.dist = next(str(x.get("backend", "gloo")) for x in got if x.get("ready"))
                    del waiting[fd]
        for a in waiting.values():
            a.kill()
            a.dead_reason = self._why_dead(a, f"not ready in {START_TIMEOUT_S:.0f} s")

    def _why_dead(self, a: AgentProc, what: str) -> str:
        base = f"rank of {a.gpu} could not start ({what}): {a.stderr_tail() or 'no output'}"
        return self.explain(base, a) if self.explain else base

    def run(self, jobs: Sequence[Job], concurrency: int, max_ranks: int | None = None) -> None:
        """Run jobs with at most `concurrency` jobs and `max_ranks` ranks
        in flight (a job larger than `max_ranks` runs alone)."""
        self.ensure(sorted({g for j in jobs for g in j.commands}))
        queue = list(jobs)
        active: list[Job] = []
        by_fd: dict[int, tuple[AgentProc, Job]] = {}
        cap = max_ranks or sum(len(j.commands) for j in jobs)

        def fits(job: Job) -> bool:
            busy = {g for j in active for g in j.commands}
            if busy & set(job.commands):
                return False  # a rank runs one test at a time: overlapping jobs wait
            return not active or len(busy) + len(job.commands) <= cap

        while queue or active:
            for job in list(queue):
                if len(active) >= concurrency:
                    break
                if not fits(job):
                    continue
                queue.remove(job)
                self._start(job, by_fd)
                if job.error is None:
                    active.append(job)
            if not active:
                continue
            timeout = max(0.0, min(j.deadline for j in active) - time.monotonic())
            ready, _, _ = select.select(list(by_fd), [], [], min(timeout, 1.0))
            for fd in ready:
                agent, job = by_fd[fd]
                got = agent.lines()
                if got is None:
                    agent.proc.wait(timeout=10)
                    job.error = job.error or self._why_dead(
                        agent, f"died ({agent.proc.returncode})")
                    agent.dead_reason = None  # restart on next use
                    continue
                for reply in got:
                    job.replies[agent.gpu] = reply
                    if not reply.get("ok"):
                        job.error = job.error or f"{agent.gpu}: {reply.get('error')}"
            now = time.monotonic()
            for job in list(active):
                done = len(job.replies) == len(job.commands)
                if job.error is None and not done and now > job.deadline:
                    job.error = f"timed out after {job.timeout_s:.0f} s"
                if done or job.error is not None:
                    self._finish(job, by_fd, done)
                    active.remove(job)

    def _start(self, job: Job, by_fd: dict[int, tuple[AgentProc, Job]]) -> None:
        # ranks killed out of a failed test of this batch come back before their next one
        self.ensure(list(job.commands))
        job.deadline = time.monotonic() + job.timeout_s
        for g in job.commands:
            a = self.agents[g]
            if not a.ready or a.proc.poll() is not None:
                job.error = a.dead_reason or f"rank of {g} is not running"
                return
        for g, cmd in job.commands.items():
            a = self.agents[g]
            if not a.send(cmd):
                job.error = f"rank of {g} stopped taking commands"
            by_fd[a.fd] = (a, job)

    def _finish(self, job: Job, by_fd: dict[int, tuple[AgentProc, Job]], done: bool) -> None:
        for g in job.commands:
            a = self.agents[g]
            by_fd.pop(a.fd, None)
            if not done and g not in job.replies and a.proc.poll() is None:
                a.kill()  # still inside a failed collective: restart it clean on next use
                a.ready = False

    def close(self) -> None:
        # Every agent is asked to exit first, then each is waited for: they wind down
        # together (torch's teardown under a CPU quota takes seconds), not one after another.
        for a in self.agents.values():
            if a.proc.poll() is None:
                a.send({"op": "exit"})
        for a in self.agents.values():
            a.stop()
        self.agents.clear()


def results(jobs: Sequence[Job], fields: Callable[[list[dict[str, Any]]], dict[str, Any]],
            ) -> list[Result]:
    out = []
    for j in jobs:
        if j.error is not None:
            out.append(Result(False, {}, j.error))
        else:
            out.append(Result(True, fields([j.replies[g] for g in j.commands])))
    return out
