"""Two `rackscale demo` runs at once in one directory: both finish, neither crashes.

They share the database, the simulated plant file and the checkpoint tiers under
./rackscale-data; the second waits for the first (a lock) instead of racing it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def test_two_demos_at_once_in_one_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    procs = []
    for i in range(2):
        # Output to files, not pipes: a demo blocked on a full pipe would hold the lock.
        out, err = (tmp_path / f"out{i}").open("w"), (tmp_path / f"err{i}").open("w")
        procs.append(subprocess.Popen([sys.executable, "-m", "rackscale", "demo"], cwd=work,
                                      env=dict(os.environ), stdout=out, stderr=err))
    deadline = time.monotonic() + 600
    for p in procs:
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    outs = [((tmp_path / f"out{i}").read_text(), (tmp_path / f"err{i}").read_text())
            for i in range(2)]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, (out[-3000:], err[-3000:])
        assert "Traceback" not in err, err[-3000:]
        assert "demo finished" in out
    # They started together, so one found the other running and said it waits.
    assert any("another `rackscale demo` is running" in err for _, err in outs)
    assert not list((work / "rackscale-data").glob("*.tmp"))
