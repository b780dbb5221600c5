"""`serve --dcgm`: the server scrapes dcgm-exporter pages from a real HTTP server beside its API,
through the same operation as `telemetry watch`; /api/v1/telemetry shows the last scrape or
error; a page that breaks is reported and the next scrape goes on; the watch's thread ends
with the server."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from rackscale.server import ServerConfig, create_app
from rackscale.server.config import ServerConfigError
from rackscale.store import Kind, Store
from tests.telemetry.conftest import Exporter
from tests.telemetry.pages import page
from tests.telemetry.test_scrape import _first, _store


def _until(client: TestClient, done: Any, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = client.get("/api/v1/telemetry").json()
        if done(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"the watch did not get there in {timeout_s} s: {body}")
        time.sleep(0.1)


def test_the_server_scrapes_records_and_survives_a_bad_page(exporter: Exporter,
                                                            tmp_path: Path) -> None:
    store, _, db = _store(tmp_path)
    exporter.pages["/metrics"] = page(_first())
    cfg = ServerConfig(db=db, dcgm=(f"{exporter.url}/metrics",), dcgm_every_s=1.0)
    app = create_app(cfg, Store(db))
    with TestClient(app) as client:
        first = _until(client, lambda b: b["scrapes"] >= 1)
        assert first["status"] == "on" and first["last_error"] is None
        kinds = {f["component"]: f["kind"] for f in first["last"]["findings"]}
        assert kinds == {"east/r01/c01/gpu1": "gpu_dead", "east/r01/c02/gpu1": "hbm_degraded",
                         "east/r02/c01/gpu0": "hbm_degraded"}  # as `telemetry scrape` finds
        assert store.count_events(Kind.CERTIFY_FINDING) == 3
        exporter.pages["/metrics"] = "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\" not a page\n"
        broken = _until(client, lambda b: b["errors"] >= 1)
        assert "metrics:1:" in broken["last_error"] and "not Prometheus text" in broken[
            "last_error"], broken  # the page and its line, as the CLI says it
        exporter.pages["/metrics"] = page(_first())
        again = _until(client, lambda b: b["last_error"] is None and b["errors"] >= 1
                       and b["scrapes"] >= 2)
        assert again["last"]["findings"] == [] and again["last"]["repeated"] == 3
    thread = app.state.telemetry._thread
    assert thread is not None and not thread.is_alive()  # stopped with the server
    assert store.count_events(Kind.CERTIFY_FINDING) == 3  # nothing recorded twice


def test_without_dcgm_the_watch_is_off_and_bad_options_are_refused(tmp_path: Path) -> None:
    _, _, db = _store(tmp_path)
    with TestClient(create_app(ServerConfig(db=db))) as client:
        assert client.get("/api/v1/telemetry").json()["status"] == "off"
    with pytest.raises(ServerConfigError, match="--dcgm-every"):
        ServerConfig(db=db, dcgm=("x",), dcgm_every_s=0.5)
    with pytest.raises(ServerConfigError, match="give --dcgm too"):
        ServerConfig(db=db, dcgm_hosts="hosts.yaml")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(ServerConfigError, match="fleet load"):
        create_app(ServerConfig(db=empty, dcgm=("x",)))
