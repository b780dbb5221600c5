"""The metrics the alert rules (deploy/prometheus) read: each rack's lifecycle state and
whether it serves, from the fleet state model, and incidents per supervised job."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from rackscale.fleet import Topology, seed_fleet
from rackscale.lifecycle import SERVING_RACK_STATES
from rackscale.server import ServerConfig, create_app
from rackscale.server.ops import job_metrics
from rackscale.state import FleetState
from rackscale.store import Store

from .conftest import DRAIN_API, TOKEN, copy_db


def _series(text: str, name: str) -> list[dict[str, str]]:
    return [s.labels | {"value": str(s.value)} for fam in text_string_to_metric_families(text)
            for s in fam.samples if s.name == name]


def test_rack_state_is_the_fleet_states_and_follows_a_drain(demo_db: Path,
                                                            tmp_path: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'r.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url, token=TOKEN), store))
    text = client.get("/metrics").text
    topo = Topology.build(seed_fleet("seed-504"))
    truth = FleetState.load(store, topo)
    states = _series(text, "rackscale_rack_state")
    # One series per rack, value 1, its state the fleet state's.
    assert sorted(s["rack"] for s in states) == sorted(r.id for r in topo.racks)
    assert {s["rack"]: s["state"] for s in states} == {
        r.id: truth.state_of(r.id) for r in topo.racks}
    assert {s["value"] for s in states} == {"1.0"}
    serving_names = {s.value for s in SERVING_RACK_STATES}
    serving = {s["rack"]: s["value"] for s in _series(text, "rackscale_rack_serving")}
    assert serving == {r.id: "1.0" if truth.state_of(r.id) in serving_names else "0.0"
                       for r in topo.racks}
    assert "1.0" in serving.values() and "0.0" in serving.values()  # the seed has both
    # Regions agree with the topology (the rules join on rack and region).
    assert {s["rack"]: s["region"] for s in states} == {r.id: r.region for r in topo.racks}

    assert serving[DRAIN_API] == "1.0"
    resp = client.post(f"/api/v1/racks/{DRAIN_API}/drain", json={"reason": "alert test"},
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200, resp.text
    text = client.get("/metrics").text
    after = {s["rack"]: s["state"] for s in _series(text, "rackscale_rack_state")}
    assert after[DRAIN_API] == "draining"
    assert {s["rack"]: s["value"] for s in _series(text, "rackscale_rack_serving")}[
        DRAIN_API] == "0.0"


def test_job_incidents_count_per_job_and_the_newest_detection() -> None:
    rows = [{"job": "train-1", "detected_at": 100.0}, {"job": "train-1", "detected_at": 300.0},
            {"job": "train-1", "detected_at": 200.0}, {"job": "eval-2", "detected_at": None}]
    fams = {f.name: f for f in job_metrics(rows)}
    total = {s.labels["job_name"]: s.value for s in fams["rackscale_job_incidents"].samples}
    assert total == {"train-1": 3, "eval-2": 1}
    last = {s.labels["job_name"]: s.value
            for s in fams["rackscale_job_last_incident_timestamp_seconds"].samples}
    assert last == {"train-1": 300.0}  # eval-2 recorded no detection time
    assert all(s.name == "rackscale_job_incidents_total"
               for s in fams["rackscale_job_incidents"].samples)


def test_gpus_of_a_drained_rack_are_not_counted_as_production_and_trays_are_by_state(
        demo_db: Path, tmp_path: Path) -> None:
    """A rack drained while its trays stay `production` in their own rows: /metrics and the
    summary count its GPUs as draining (a job cannot use them); the tray-state metric
    counts every tray of every rack by its own state, as the fleet state has it."""
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'g.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url, token=TOKEN), store))
    topo = Topology.build(seed_fleet("seed-504"))
    rack = topo.rack(DRAIN_API)
    per_rack = rack.gpu_end - rack.gpu_first
    before = client.get("/api/v1/summary").json()["gpus_by_state"]
    resp = client.post(f"/api/v1/racks/{DRAIN_API}/drain", json={"reason": "count test"},
                       headers={"Authorization": f"Bearer {TOKEN}"})
    assert resp.status_code == 200, resp.text
    truth = FleetState.load(store, topo)
    tray_ids = sorted({topo.ids[int(t)] for t in topo.gpu_tray[rack.gpu_first:rack.gpu_end]})
    own = [truth.state_of(t) for t in tray_ids]
    assert own.count("production") > 0  # their own rows still say production

    after = client.get("/api/v1/summary").json()["gpus_by_state"]
    moved = 72 // len(tray_ids) * own.count("production")
    assert after.get("draining", 0) == before.get("draining", 0) + moved
    assert after["production"] == before["production"] - moved
    assert sum(after.values()) == sum(before.values()) == len(topo.gpu_ids)
    text = client.get("/metrics").text
    gpus = {s["state"]: 0.0 for s in _series(text, "rackscale_gpus")}
    for s in _series(text, "rackscale_gpus"):
        gpus[s["state"]] += float(s["value"])
    assert {k: int(v) for k, v in gpus.items()} == after
    assert per_rack == 72

    trays = _series(text, "rackscale_rack_trays")
    mine = {s["state"]: float(s["value"]) for s in trays if s["rack"] == DRAIN_API}
    expect: dict[str, float] = {}
    for st in own:
        expect[str(st)] = expect.get(str(st), 0.0) + 1
    assert mine == expect
    assert {s["rack"] for s in trays} == {r.id for r in topo.racks}
