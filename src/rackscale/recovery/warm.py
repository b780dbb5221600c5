"""Warm standby ranks: for a command that supports it (`rackscale job train-demo` does), the
supervisor keeps one process per GPU slot started ahead of need, past its interpreter start
and imports, waiting for its rank. A restart then hands each new rank to a waiting process
instead of starting one, which takes the process start-up (seconds for torch) off the
recovery's critical path.

The protocol: a standby process is started with `RACKSCALE_WARM=<file>`; once ready it writes
`<file>.ready`; its rank's environment arrives as JSON in `<file>` (written atomically); it
then runs as if started with that environment. Standbys die with the supervisor like ranks.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from rackscale.certify import Placement
from rackscale.durable import write_atomic
from rackscale.recovery.launch import Launcher, RankProcess, stop_all

WARM_ENV = "RACKSCALE_WARM"


def wait_for_rank(poll_s: float = 0.01) -> None:
    """The command's side: when started as a standby, say so and wait for the rank's
    environment (bounded by the supervisor's life: the process dies with it)."""
    path = os.environ.get(WARM_ENV)
    if not path:
        return
    go = Path(path)
    write_atomic(go.with_suffix(".ready"), str(os.getpid()), sync=False)
    while not go.exists():
        time.sleep(poll_s)
    env = json.loads(go.read_text(encoding="utf-8"))
    os.environ.update({str(k): str(v) for k, v in env.items()})
    del os.environ[WARM_ENV]


class WarmPool:
    """One standby process per slot, started by the launcher like a rank."""

    def __init__(self, launcher: Launcher, placement: Placement, command: Sequence[str],
                 job_dir: Path) -> None:
        self.launcher, self.placement, self.command = launcher, placement, command
        self.dir = job_dir / "warm"
        self.standby: dict[str, tuple[RankProcess, Path]] = {}
        self._ids = itertools.count()

    def refill(self, slots: Sequence[str]) -> None:
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
            self.standby[slot] = (proc, go)

    def take(self, slot: str, env: Mapping[str, str]) -> RankProcess | None:
        """The slot's standby with `env` handed over, or None when none is ready yet."""
        got = self.standby.get(slot)
        if got is None:
            return None
        proc, go = got
        if proc.poll() is not None or not go.with_suffix(".ready").exists():
            return None
        del self.standby[slot]
        write_atomic(go, json.dumps(dict(env)), sync=False)
        return proc

    def close(self, timeout_s: float) -> None:
        stop_all([p for p, _ in self.standby.values()], timeout_s)
        self.standby.clear()
