"""The heartbeat channel between ranks and their supervisor: one append-only JSON-lines file
per rank and attempt, in the job directory.

A file, not a socket: it needs no port, survives a supervisor restart (the new supervisor
reads what the ranks wrote), and works on every runner whose ranks share the job directory
(one host, or a shared file system under Slurm). Each line is one beat:
`{"phase": "start"|"restored"|"sync"|"step"|"done", "step": n, "t": unix time, ...}`:
`sync` is written when a rank has finished its step's compute and enters the collective
(with `compute_s`, and `ckpt: true` when checkpoint work of the rank, a save or its push to
the tiers, ran in its process during that compute), `step` when the step is complete (with
`step_s`).

A beat belongs to one attempt of one supervisor's run: the supervisor gives each attempt an id
(`$RACKSCALE_RUN`), the writer puts it in every line (`run`), and the reader passes over a
line with another one, so beats left in a reused or copied job directory are never taken for
the running attempt's.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_ENV = "RACKSCALE_RUN"  # the running attempt's id, set by the supervisor for each rank
PHASES = ("start", "restored", "sync", "step", "done")
# Progress order inside one step: a rank that has sent `sync` of step s is further than one
# whose last beat is `step` s-1.
_ORDER = {p: i for i, p in enumerate(PHASES)}


def beat_path(job_dir: str | os.PathLike[str], attempt: int, rank: int) -> Path:
    return Path(job_dir) / "beats" / f"a{attempt:03d}-r{rank:04d}.jsonl"


class HeartbeatWriter:
    """The rank's side: one line per beat, flushed at once (the supervisor reads it live)."""

    def __init__(self, path: str | os.PathLike[str], run: str | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a", encoding="utf-8")
        self.run = run if run is not None else os.environ.get(RUN_ENV) or None

    def beat(self, phase: str, step: int, **extra: Any) -> None:
        line = {"phase": phase, "step": step, "t": time.time(), **extra}
        if self.run is not None:
            line["run"] = self.run
        self._f.write(json.dumps(line) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


@dataclass(slots=True)
class RankBeats:
    """What the supervisor knows of one rank from its beats so far."""

    rank: int
    last_t: float | None = None
    last_phase: str = ""
    last_step: int = -1
    done_step: int = -1  # last completed step
    max_gap_s: float = 0.0
    steps_seen: int = 0  # completed steps in this attempt
    compute_s: dict[int, float] = field(default_factory=dict)
    sync_at: dict[int, float] = field(default_factory=dict)
    step_at: dict[int, float] = field(default_factory=dict)
    # Steps whose compute overlapped the rank's own checkpoint work: their time says how busy
    # the checkpoint kept the process, not how fast its GPU is, so they are not scored.
    ckpt_steps: set[int] = field(default_factory=set)
    restore_s: float | None = None
    started_at: float | None = None
    restored_at: float | None = None
    first_step_at: float | None = None
    done: bool = False

    @property
    def progress(self) -> tuple[int, int]:
        return (self.last_step, _ORDER.get(self.last_phase, -1))

    def add(self, b: dict[str, Any]) -> None:
        t = float(b["t"])
        # Gaps count from the first completed step on: start-up and restore are not steps.
        if self.last_t is not None and self.steps_seen >= 1:
            self.max_gap_s = max(self.max_gap_s, t - self.last_t)
        self.last_t, self.last_phase, self.last_step = t, b["phase"], int(b["step"])
        if b["phase"] == "sync" and "compute_s" in b:
            self.compute_s[int(b["step"])] = float(b["compute_s"])
            self.sync_at[int(b["step"])] = t
            if b.get("ckpt"):
                self.ckpt_steps.add(int(b["step"]))
        elif b["phase"] == "step":
            self.done_step = int(b["step"])
            self.step_at[self.done_step] = t
            self.steps_seen += 1
            if self.first_step_at is None:
                self.first_step_at = t
        elif b["phase"] == "start":
            self.started_at = t
        elif b["phase"] == "restored":
            self.restore_s = b.get("restore_s")
            self.restored_at = t
        elif b["phase"] == "done":
            self.done = True


class BeatReader:
    """The supervisor's side: reads each rank's file incrementally (whole lines only)."""

    def __init__(self, job_dir: str | os.PathLike[str], attempt: int, world: int,
                 run: str | None = None) -> None:
        self.paths = [beat_path(job_dir, attempt, r) for r in range(world)]
        self.offsets = [0] * world
        self.ranks = [RankBeats(rank=r) for r in range(world)]
        self.run = run  # the running attempt's id: a line with another is not its
        self.foreign = 0  # lines passed over for another run's id

    def poll(self) -> list[RankBeats]:
        for r, p in enumerate(self.paths):
            try:
                with p.open("rb") as f:
                    f.seek(self.offsets[r])
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a line being written is read next time
            for line in data[:end].splitlines():
                if not line.strip():
                    continue
                b = json.loads(line)
                if self.run is not None and b.get("run", self.run) != self.run:
                    self.foreign += 1
                    continue
                self.ranks[r].add(b)
            self.offsets[r] += end
        return self.ranks
