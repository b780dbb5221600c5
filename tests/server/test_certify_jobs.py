"""Starting a certification run through the API: a background job on the twin with a status
URL, stored like `rackscale certify run` stores it."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from rackscale.server import ServerConfig, create_app
from rackscale.store import Store

from .conftest import TOKEN, copy_db

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def _wait(client: TestClient, url: str, timeout_s: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = client.get(url).json()
        if body["state"] in ("succeeded", "failed"):
            return body  # type: ignore[no-any-return]
        time.sleep(0.2)
    raise AssertionError(f"{url} still not finished after {timeout_s} s")


def test_certify_run_as_a_background_job(demo_db: Path, tmp_path: Path) -> None:
    db = copy_db(demo_db, tmp_path / "j.db")
    store = Store(f"sqlite:///{db}")
    client = TestClient(create_app(ServerConfig(db=store.url, token=TOKEN), store))
    runs_before = client.get("/api/v1/certify/runs").json()["total"]
    body = {"stages": [1, 2], "repeats": 2, "twin_seed": 11}
    refused = [client.post("/api/v1/certify/runs", json=body),
               client.post("/api/v1/certify/runs", json=body,
                           headers={"Authorization": "Bearer wrong-token-0123456789"}),
               client.post("/api/v1/certify/runs", json=body | {"stages": [9]}, headers=AUTH),
               client.post("/api/v1/certify/runs", json=body | {"backend": "real"},
                           headers=AUTH)]
    assert [r.status_code for r in refused] == [401, 401, 422, 422]
    assert all(set(r.json()["error"]) == {"status", "kind", "message"} for r in refused)
    # Another writer holds the database while the job runs: the job cannot store its run
    # and finish, so it is still running when the second start comes (no race).
    holder = sqlite3.connect(db, timeout=1)
    holder.execute("BEGIN IMMEDIATE")
    started = client.post("/api/v1/certify/runs", json=body, headers=AUTH)
    assert started.status_code == 202, started.text
    url = started.headers["location"]
    assert url == started.json()["status_url"] == f"/api/v1/certify/jobs/{started.json()['id']}"
    assert started.json()["state"] in ("queued", "running")
    again = client.post("/api/v1/certify/runs", json=body, headers=AUTH)
    assert again.status_code == 409 and started.json()["id"] in again.json()["error"]["message"]
    assert client.get(started.headers["location"]).json()["state"] in ("queued", "running")
    holder.rollback()
    holder.close()
    done = _wait(client, url)
    assert done["state"] == "succeeded", done
    assert done["basis"] == "simulated" and done["request"]["twin_seed"] == 11
    runs = client.get("/api/v1/certify/runs").json()
    assert runs["total"] == runs_before + 1
    newest = runs["items"][0]["payload"]
    assert newest["run_id"] == done["run_id"] and newest["stages"] == [1, 2]
    assert newest["backend"] == "twin" and newest["seed"] == 11
    assert client.get("/api/v1/certify/jobs/0123456789ab").status_code == 404
    assert client.get("/api/v1/certify/jobs/..%2Fx").status_code in (404, 422)
    # A finished job frees the slot: the next one starts.
    nxt = client.post("/api/v1/certify/runs", json=body, headers=AUTH)
    assert nxt.status_code == 202
    assert _wait(client, nxt.headers["location"])["state"] == "succeeded"


def test_certify_start_refused_without_a_token_configured(demo_db: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'n.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url), store))
    r = client.post("/api/v1/certify/runs", json={}, headers=AUTH)
    assert r.status_code == 403
    assert client.get("/api/v1/certify/runs").json()["total"] == 1  # the demo's own run only


def test_an_empty_body_is_a_clean_run_and_seed_is_the_clis_name(demo_db: Path,
                                                                 tmp_path: Path) -> None:
    """`{}` runs without faults (as `certify run` without --faults), so it fits any fleet and
    names no file of the server's; `seed` is the CLI's --seed, `twin_seed` its old name."""
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'e.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url, token=TOKEN), store))
    both = client.post("/api/v1/certify/runs", json={"seed": 3, "twin_seed": 4}, headers=AUTH)
    assert both.status_code == 422 and "give the seed once" in both.json()["error"]["message"]
    started = client.post("/api/v1/certify/runs", json={}, headers=AUTH)
    assert started.status_code == 202, started.text
    done = _wait(client, started.headers["location"])
    assert done["state"] == "succeeded", done
    assert done["request"]["faults"] == "none" and done["request"]["seed"] == 7
    newest = client.get("/api/v1/certify/runs").json()["items"][0]["payload"]
    assert newest["run_id"] == done["run_id"] and newest["faults_file"] is None
    assert newest["stages"] == [1, 2, 3, 4] and newest["seed"] == 7
    quick = {"stages": [1], "repeats": 1}
    for body, seed in ((quick | {"seed": 5}, 5), (quick | {"twin_seed": 6}, 6)):
        r = client.post("/api/v1/certify/runs", json=body, headers=AUTH)
        assert r.status_code == 202, r.text
        done = _wait(client, r.headers["location"])
        assert done["state"] == "succeeded", done
        assert done["request"]["seed"] == done["request"]["twin_seed"] == seed
        assert client.get("/api/v1/certify/runs").json()["items"][0]["payload"]["seed"] == seed
