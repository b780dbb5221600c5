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
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, "-m", "rackscale", "demo"], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = []
    deadline = time.monotonic() + 400
    for p in procs:
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        outs.append((p.returncode, out, err))
    for rc, out, err in outs:
        assert rc == 0, (out[-3000:], err[-3000:])
        assert "Traceback" not in err, err[-3000:]
        assert "demo finished" in out
    # One of them found the other running and said so (they started together).
    assert any("another `rackscale demo` is running" in err for _, _, err in outs)
    assert not list((tmp_path / "rackscale-data").glob("*.tmp"))
