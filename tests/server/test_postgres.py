"""The server on a real PostgreSQL store (the same app, in process, over HTTP via httpx)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rackscale.cli.demo import DemoContext, step_fleet
from rackscale.cli.lifecycle import step_onboarding
from rackscale.fleet import Topology, seed_fleet
from rackscale.server import ServerConfig, create_app
from rackscale.store import Store
from tests.pg import fresh_database

from .conftest import TOKEN

pytestmark = pytest.mark.postgres


def test_api_and_metrics_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    store = Store(fresh_database(postgres_url, "srv"))
    ctx = DemoContext(topo=Topology.build(seed_fleet("seed-504")), store=store, seed=7,
                      data_dir=tmp_path)
    step_fleet(ctx)
    step_onboarding(ctx)
    client = TestClient(create_app(ServerConfig(db=store.url, token=TOKEN), store))
    summary = client.get("/api/v1/summary").json()
    assert summary["gpus"] == 504 and summary["racks_by_state"] == {"burn_in": 7}
    racks = client.get("/api/v1/racks?limit=4&offset=4").json()
    assert racks["total"] == 7 and len(racks["items"]) == 3
    metrics = client.get("/metrics").text
    gpus = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("rackscale_gpus{"))
    assert gpus == 504
    seq = client.get("/api/v1/health").json()["seq"]
    # burn_in -> draining is not in the rack table: refused in the one error shape.
    r = client.post("/api/v1/racks/us-east/r01/drain", json={"reason": "x"},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 409 and "burn_in" in r.json()["error"]["message"]
    assert client.get("/api/v1/health").json()["seq"] == seq
    hist = client.get("/api/v1/racks/us-east/r01").json()["history"]
    assert [e["payload"]["to"] for e in hist][-1] == "burn_in"
    # A NUL in a reason was a 500 on PostgreSQL (it refuses NUL in text); an ESC sequence
    # would reach an operator's terminal. Both are refused before the store is touched.
    for reason in ("cable\x00swap", "x\x1b]0;pwned\x07"):
        r = client.post("/api/v1/racks/us-east/r01/drain", json={"reason": reason},
                        headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 422 and "control characters" in r.json()["error"]["message"]
    assert client.get("/api/v1/health").json()["seq"] == seq
    store.close()
