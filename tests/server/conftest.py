"""A demo-seeded store and a real `rackscale serve` subprocess on a free loopback port.

The store is seeded by the demo's own steps (fleet + inventory, lifecycle onboarding on the
simulated plant, the certification ladder on the twin, triage), not by hand-written rows.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rackscale.cli.certify import step_certify
from rackscale.cli.demo import DemoContext, step_fleet
from rackscale.cli.lifecycle import step_onboarding, step_triage
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store

from ..conftest import free_port
from ..needs import require

TOKEN = "s3rver-test-token-0123456789abcdef"
START_TIMEOUT_S = 90.0


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("server-demo")
    db = root / "rackscale.db"
    store = Store(f"sqlite:///{db}")
    ctx = DemoContext(topo=Topology.build(seed_fleet("seed-504")), store=store, seed=7,
                      data_dir=root)
    for step in (step_fleet, step_onboarding, step_certify, step_triage):
        step(ctx)
    store.close()
    return db


def copy_db(src: Path, dst: Path) -> Path:
    """A consistent copy of a WAL-mode SQLite file (the backup API, not a file copy)."""
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    return dst


@dataclass
class Server:
    url: str
    db: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return request(self.url + path, headers=headers)

    def post(self, path: str, body: bytes | dict[str, Any], token: str | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h = {"Content-Type": "application/json"} | (headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return request(self.url + path, data=data, headers=h, method="POST")


def request(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None,
            method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw, status, ctype = resp.read(), resp.status, resp.headers.get("content-type", "")
    except urllib.error.HTTPError as err:
        raw, status, ctype = err.read(), err.code, err.headers.get("content-type", "")
    return status, json.loads(raw) if "json" in ctype else raw.decode()


def start_server(db: Path, tmp: Path, *, token: str | None = TOKEN,
                 extra: list[str] | None = None) -> Server:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "RACKSCALE_SERVER_TOKEN"}
    args = [sys.executable, "-m", "rackscale", "serve", "--db", f"sqlite:///{db}",
            "--port", str(port), *(extra or [])]
    if token is not None:
        tf = tmp / "token"
        tf.write_text(token + "\n")
        tf.chmod(0o600)
        args += ["--token-file", str(tf)]
    log = tmp / f"serve-{port}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, env=env)
    srv = Server(url=f"http://127.0.0.1:{port}", db=db, proc=proc, log=log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rackscale serve exited {proc.returncode}: {log.read_text()}")
        try:
            if srv.get("/api/v1/health")[0] == 200:
                return srv
        except OSError:
            pass
        time.sleep(0.2)
    stop_server(srv)
    raise RuntimeError(f"rackscale serve did not answer in {START_TIMEOUT_S} s: "
                       f"{log.read_text()}")


def stop_server(srv: Server) -> None:
    srv.proc.terminate()
    try:
        srv.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        srv.proc.kill()
        srv.proc.wait(timeout=15)


@pytest.fixture(scope="session")
def server(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the session: read tests, refusals, Prometheus, fuzzing. Tests that drain
    use racks no other test reads the state of (see DRAIN_API, DRAIN_BROWSER)."""
    tmp = tmp_path_factory.mktemp("server")
    srv = start_server(copy_db(demo_db, tmp / "rackscale.db"), tmp)
    yield srv
    stop_server(srv)


PROMETHEUS = shutil.which("prometheus")


@dataclass
class Prometheus:
    """A real Prometheus server (Debian `prometheus`) scraping rackscale serve every second."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        return self.api("query", query=promql)["result"]

    def api(self, path: str, **params: str) -> Any:
        qs = urllib.parse.urlencode(params)
        status, body = request(f"{self.url}/api/v1/{path}?{qs}")
        assert status == 200 and body["status"] == "success", (promql_of(params), body)
        return body["data"]

    def wait_for(self, promql: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """The query's result once it is not empty (fails after `timeout_s`)."""
        deadline, got = time.monotonic() + timeout_s, []
        while time.monotonic() < deadline and not got:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            with contextlib.suppress(OSError):  # not listening yet
                got = self.query(promql)
            if not got:
                time.sleep(0.25)
        assert got, f"no result for {promql} in {timeout_s:g} s"
        return got


def promql_of(params: dict[str, str]) -> str:
    return params.get("query", params.get("match[]", ""))


@contextlib.contextmanager
def prometheus(targets: list[Server], tmp: Path,
               rule_files: list[Path] | None = None) -> Iterator[Prometheus]:
    """Prometheus scraping `targets` as the scrape job `rackscale` (the name the rules in
    deploy/prometheus expect), evaluating `rule_files` every second."""
    require(None if PROMETHEUS else "Debian prometheus is not installed")
    assert PROMETHEUS is not None
    (tmp / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in rule_files or []],
        "scrape_configs": [{"job_name": "rackscale", "static_configs": [
            {"targets": [t.url.removeprefix("http://") for t in targets]}]}]}))
    port = free_port()
    log = tmp / "prom.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--storage.tsdb.path={tmp / 'tsdb'}"],
            stdout=subprocess.DEVNULL, stderr=fh)
    prom = Prometheus(url=f"http://127.0.0.1:{port}", proc=proc, log=log)
    try:
        prom.wait_for('up{job="rackscale"} == 1')
        yield prom
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# Degraded racks of the seed demo (drain is legal from degraded); one per draining test.
DRAIN_API = "us-east/r01"
DRAIN_BROWSER = "us-east/r02"
