"""Several `fleet load` processes at once into one new database: all succeed, one inventory.

The loser of the race for the first write reads again and finds the rows (a load is
idempotent); no unique-key error or "database is locked" reaches the operator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rackscale.fleet import RACK
from rackscale.store import Store


def test_concurrent_loads_of_one_fleet(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    # What is tested is that every load succeeds with one inventory, not how long a loser
    # waits for the winner's write: on a starved CI machine that passed the 10 s default.
    env = dict(os.environ, RACKSCALE_DB_LOCK_TIMEOUT_S="120")
    procs = [subprocess.Popen([sys.executable, "-m", "rackscale", "fleet", "load", "--fleet",
                               "seed-504", "--db", db], cwd=tmp_path, env=env,
                              stdout=(tmp_path / f"o{i}").open("w"),
                              stderr=(tmp_path / f"e{i}").open("w")) for i in range(3)]
    for p in procs:
        p.wait(timeout=300)
    for i, p in enumerate(procs):
        err = (tmp_path / f"e{i}").read_text()
        assert p.returncode == 0 and "Traceback" not in err, err[-3000:]
    store = Store(db)
    assert store.count_components(kind=RACK) == 7
    assert store.count_events("fleet.rack_added") == 7  # loaded once, not three times
