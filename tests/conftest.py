"""Fixtures shared by every room's tests: the seed topology, a SQLite store, a real PostgreSQL."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store


@pytest.fixture(scope="session")
def seed_topo() -> Topology:
    return Topology.build(seed_fleet())


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[Store]:
    store = Store(f"sqlite:///{tmp_path}/rackscale.db")
    yield store
    store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        pytest.fail("PostgreSQL server binaries not found; `make test` installs them "
                    "(Debian package postgresql)")
    return os.path.dirname(found[-1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a real PostgreSQL server: $RACKSCALE_TEST_PG_URL, or one started here on a free
    loopback port in a temporary data directory, stopped at the end of the session."""
    if os.environ.get("RACKSCALE_TEST_PG_URL"):
        yield os.environ["RACKSCALE_TEST_PG_URL"]
        return
    bindir = _pg_bin()
    root = tempfile.mkdtemp(prefix="rackscale-pg-")
    data = os.path.join(root, "data")
    port = free_port()
    # The server refuses to run as root; when the tests run as root it runs as `postgres`.
    run_as: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*run_as, f"{bindir}/initdb", "-D", data, "-U", "rackscale", "-A", "trust",
                    "--no-sync"], check=True, capture_output=True)
    log = os.path.join(root, "server.log")
    subprocess.run([*run_as, f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o",
                    f"-p {port} -c listen_addresses=127.0.0.1 -k {root} -c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([f"{bindir}/pg_isready", "-h", "127.0.0.1", "-p", str(port)],
                             capture_output=True).returncode != 0:
            if time.monotonic() > deadline:
                pytest.fail(f"PostgreSQL did not come up; see {log}")
            time.sleep(0.2)
        subprocess.run([f"{bindir}/createdb", "-h", "127.0.0.1", "-p", str(port), "-U",
                        "rackscale", "rackscale"], check=True, capture_output=True)
        yield f"postgresql+psycopg://rackscale@127.0.0.1:{port}/rackscale"
    finally:
        subprocess.run([*run_as, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
