"""The hot responses are serialized once per snapshot: an event appended by another process
(a controller, the CLI) must still reach every one of them, without a restart."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from rackscale.lifecycle import transition
from rackscale.server import ServerConfig, create_app
from rackscale.server.metrics import Metrics
from rackscale.server.snapshot import SnapshotCache
from rackscale.store import Store

from .conftest import DRAIN_API, copy_db, start_server, stop_server


def test_an_event_from_another_process_reaches_the_cached_responses(demo_db: Path,
                                                                    tmp_path: Path) -> None:
    srv = start_server(copy_db(demo_db, tmp_path / "c.db"), tmp_path, token=None)
    try:
        _, before = srv.get("/api/v1/summary")
        assert srv.get("/api/v1/summary")[1] == before  # nothing moved: the same body
        rows = {r["id"]: r for r in srv.get("/api/v1/racks?limit=50")[1]["items"]}
        assert rows[DRAIN_API]["state"] == "degraded"
        store = Store(f"sqlite:///{srv.db}")
        t = transition(store, DRAIN_API, "draining", actor="test", reason="another process")
        store.close()
        deadline = time.monotonic() + 60
        while srv.get("/api/v1/summary")[1]["seq"] < t.seq:
            assert time.monotonic() < deadline, "the summary never showed the new event"
            time.sleep(0.1)
        _, after = srv.get("/api/v1/summary")
        assert after["racks_by_state"].get("draining", 0) == \
            before["racks_by_state"].get("draining", 0) + 1
        assert after["racks_by_state"]["degraded"] == before["racks_by_state"]["degraded"] - 1
        rows = {r["id"]: r for r in srv.get("/api/v1/racks?limit=50")[1]["items"]}
        assert rows[DRAIN_API]["state"] == "draining"
        _, live = srv.get("/api/v1/live")
        assert live["seq"] >= t.seq and live["racks"][DRAIN_API]["state"] == "draining"
        # The hot routes hand FastAPI ready bytes; their schema still says what they are.
        _, spec = srv.get("/api/v1/openapi.json")
        ok = spec["paths"]["/api/v1/racks"]["get"]["responses"]["200"]
        assert ok["content"]["application/json"]["schema"]["$ref"].endswith("/Page")
        for path in ("/api/v1/summary", "/api/v1/live"):
            assert "application/json" in spec["paths"][path]["get"]["responses"]["200"]["content"]
    finally:
        stop_server(srv)



def test_repeated_gets_are_answered_before_routing(demo_db: Path, tmp_path: Path) -> None:
    """HotReads answers a GET a route already answered for this snapshot, byte for byte; other
    parameters, and a request with a body, still go through the routes (and their checks)."""
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'h.db')}")
    app = create_app(ServerConfig(db=store.url, port=0), store)
    with TestClient(app) as client:
        first = client.get("/api/v1/racks?limit=3")
        snap = app.state.cache.peek()
        assert snap is not None and snap.answered["/api/v1/racks?limit=3"] == first.content
        again = client.get("/api/v1/racks?limit=3")
        assert again.status_code == 200 and again.content == first.content
        assert again.headers["content-type"] == "application/json"
        assert client.get("/api/v1/racks?limit=0").status_code == 422  # not from the cache
        big = client.request("GET", "/api/v1/racks?limit=3", content=b"x" * 20000)
        assert big.status_code == 413  # a body still meets the body limit
    store.close()


def test_metrics_render_once_per_snapshot(demo_db: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'm.db')}")
    cache = SnapshotCache(store)
    metrics = Metrics(cache)
    first = metrics.render()
    assert metrics.render() is first  # nothing moved: the kept body, not a new render
    seq = store.append_event(DRAIN_API, "lifecycle.noted", {"finding_seq": 1}, reason="t")
    cache.get(wait=True)
    after = metrics.render()
    assert after is not first and f"rackscale_event_seq {float(seq)}".encode() in after
    store.close()
