"""The supervisor's own record of a job, in `<job dir>/state.json`, written atomically at each
change: which slot runs which rank, the spares left, the excluded parts, the attempt number,
the pids of the ranks. A supervisor started again on the same job directory carries on from
it (and from the latest committed checkpoint), never from a guess.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rackscale.durable import write_atomic
from rackscale.errors import UserError


class JobStateError(UserError):
    pass


class RankPid(BaseModel):
    pid: int
    start_ticks: int  # /proc/<pid>/stat field 22: tells our rank from a reused pid


class JobState(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = 1
    job: str
    # The job's identity in the checkpoint tiers (its own key space): made once, when the job
    # first starts, so a job never resumes another's checkpoints. None in a state written
    # before jobs had one (the supervisor then gives it one).
    job_id: str | None = None
    command: list[str]
    gpus: int
    assignment: list[str]  # rank -> slot (a GPU component id)
    spares: list[str]
    excluded: dict[str, str] = Field(default_factory=dict)  # slot -> why
    attempt: int = 0
    rank_pids: list[RankPid] = Field(default_factory=list)
    finished: bool = False
    returns_read: int = 0  # lines of returns.jsonl already taken (returns.py)
    # The job directory's identity (device:inode) when this was written: a state read in
    # a copy of the directory names another's processes (None: written before it was kept)
    home: str | None = None
    # ...and its path: an original still there, with that identity, makes this a copy
    home_path: str | None = None

    @staticmethod
    def path(job_dir: str | os.PathLike[str]) -> Path:
        return Path(job_dir) / "state.json"

    def save(self, job_dir: str | os.PathLike[str]) -> None:
        write_atomic(self.path(job_dir), self.model_dump_json(indent=2))

    @classmethod
    def load(cls, job_dir: str | os.PathLike[str]) -> JobState | None:
        p = cls.path(job_dir)
        if not p.exists():
            return None
        try:
            return cls.model_validate(json.loads(p.read_text(encoding="utf-8")))
        except (ValueError, ValidationError) as err:
            raise JobStateError(f"{p}: not a job state this version can read ({err}); move "
                                "it away to start the job afresh (checkpoints are kept)") from None


def start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive_ranks(state: JobState) -> list[int]:
    """Pids of the recorded ranks that still run (the same process, not a reused pid)."""
    return [r.pid for r in state.rank_pids if start_ticks(r.pid) == r.start_ticks]
