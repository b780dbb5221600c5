"""`rackscale serve --port 0` binds a free port and its start line names that port (not `:0`),
so a script can read where the server is and reach it there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import copy_db, request


def test_port_0_prints_the_bound_port(demo_db: Path, tmp_path: Path) -> None:
    db = copy_db(demo_db, tmp_path / "rackscale.db")
    env = {k: v for k, v in os.environ.items() if k != "RACKSCALE_SERVER_TOKEN"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    proc = subprocess.Popen([sys.executable, "-m", "rackscale", "serve", "--db",
                             f"sqlite:///{db}", "--port", "0"], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.match(r"rackscale serve: http://127\.0\.0\.1:(\d+)/ ", line)
        assert m is not None and int(m.group(1)) > 0, line
        status, body = request(f"http://127.0.0.1:{m.group(1)}/api/v1/health")
        assert status == 200, body
    finally:
        proc.terminate()
        proc.wait(timeout=30)
