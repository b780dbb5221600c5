"""Repaired slots going back to a running job: `<job dir>/returns.jsonl`, one line per return,
each naming the slots and the evidence that lets them back (a passing `certify run --scope`
of their tray or rack, run after the repair).

A job excluded the slots itself; it takes them back as spares at its next recovery, never in
the middle of an attempt (a spare matters only when a rank must move). The file is only
appended to, a line at a time and synced, so the supervisor, another process, reads whole
lines or none; the job state counts the lines already taken (`returns_read`), so a slot
returned, excluded again and returned again is taken back each time, and a supervisor
restarted on the job does not take a line twice.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.errors import UserError

RETURNS_FILE = "returns.jsonl"


class ReturnError(UserError):
    pass


@dataclass(frozen=True, slots=True)
class Return:
    slots: tuple[str, ...]
    evidence: dict[str, Any]  # what certified the repair (the certify run's id, its scope)
    at: float


def request_return(job_dir: Path, slots: list[str], evidence: dict[str, Any]) -> Return:
    """Ask the job in `job_dir` to take `slots` back as spares at its next recovery."""
    if not slots:
        raise ReturnError("no slot to return")
    if not evidence:
        raise ReturnError("a slot returns on evidence: give the certification that passed "
                          "after its repair")
    ret = Return(slots=tuple(slots), evidence=dict(evidence), at=time.time())
    line = json.dumps({"slots": list(ret.slots), "evidence": ret.evidence, "at": ret.at})
    with (job_dir / RETURNS_FILE).open("a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    return ret


def read_returns(job_dir: Path, start: int = 0) -> list[Return]:
    """The whole lines of the returns file from line `start` on (a line still being written,
    with no newline yet, is left for the next read)."""
    p = job_dir / RETURNS_FILE
    if not p.exists():
        return []
    text = p.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # the last piece has no newline: not whole yet
    out = []
    for n, line in enumerate(lines[start:], start + 1):
        try:
            d = json.loads(line)
            out.append(Return(slots=tuple(str(s) for s in d["slots"]),
                              evidence=dict(d["evidence"]), at=float(d["at"])))
        except (ValueError, KeyError, TypeError) as err:
            raise ReturnError(f"{p}, line {n}: not a slot return ({type(err).__name__}: "
                              f"{err}); fix or remove that line") from None
    return out
