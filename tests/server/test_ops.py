"""Incidents and checkpoints through the API, the dashboard and /metrics.

Incidents are appended by the recovery room's own Recorder (the supervisor's path: exclusion
finding, then the incident event); checkpoints are real saves into directory tiers, listed
through a tiers config given to the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from rackscale.checkpoint import default_config, demo_checkpoint
from rackscale.fleet import Topology, seed_fleet
from rackscale.recovery.record import Recorder
from rackscale.server import ServerConfig, create_app
from rackscale.server.ops import BUCKETS, incident_metrics
from rackscale.store import RecoveryIncidentV1 as IncidentPayload
from rackscale.store import Store

from .conftest import copy_db


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _incident(gpu: str, *, symptom: str, detect: float | None, restart: float | None,
              spare: str | None, attempt: int) -> IncidentPayload:
    return IncidentPayload(
        job="train-1", attempt=attempt, symptom=symptom, rank=attempt, component=gpu,  # type: ignore[arg-type]
        fault_kind="", spare=spare, evidence={"last_beat_s": 1.5}, detected_at=1.7e9 + attempt,
        detect_s=detect, localize_s=0.01, stop_s=0.4, restart_s=restart,
        start_s=None if restart is None else 2.0, restore_s=None if restart is None else 0.3,
        first_step_s=None if restart is None else 3.1,
        downtime_s=None if restart is None else restart + 3.1, ckpt_id="ckpt-00000100",
        ckpt_step=100, work_lost_steps=7, outcome="resumed" if spare else "no_spare")


@pytest.fixture
def client_with_incidents(demo_db: Path, tmp_path: Path) -> tuple[TestClient, list[dict]]:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'r.db')}")
    gpus = Topology.build(seed_fleet("seed-504")).gpu_ids
    rec = Recorder(tmp_path, store)
    made = [_incident(gpus[0], symptom="fail_stop", detect=0.8, restart=4.0, spare=gpus[70],
                      attempt=1),
            _incident(gpus[1], symptom="fail_stop", detect=12.0, restart=40.0, spare=gpus[71],
                      attempt=2),
            _incident(gpus[2], symptom="straggler", detect=None, restart=None, spare=None,
                      attempt=3)]
    # What the supervisor does on each exclusion (a payload is frozen: a changed copy).
    made = [inc.model_copy(update={"fault_kind": rec.exclude(inc)}) for inc in made]
    for inc in made:
        rec.incident(inc)
    return TestClient(create_app(ServerConfig(db=store.url), store)), \
        [i.model_dump(mode="json") for i in made]


def test_incidents_api_pages_newest_first_and_filters(client_with_incidents: Any) -> None:
    client, made = client_with_incidents
    body = client.get("/api/v1/incidents").json()
    assert body["total"] == 3
    assert [r["attempt"] for r in body["items"]] == [3, 2, 1]
    assert body["items"][0]["outcome"] == "no_spare" and body["items"][0]["restart_s"] is None
    assert body["items"][2]["component"] == made[0]["component"]
    assert body["items"][2]["detect_s"] == 0.8
    assert body["items"][2]["measured"]["basis"] == "measured"
    pages = [client.get(f"/api/v1/incidents?limit=2&offset={o}").json() for o in (0, 2)]
    assert [r["seq"] for p in pages for r in p["items"]] == [r["seq"] for r in body["items"]]
    fs = client.get("/api/v1/incidents?symptom=fail_stop").json()
    assert fs["total"] == 2 and {r["symptom"] for r in fs["items"]} == {"fail_stop"}
    assert client.get("/api/v1/incidents?job=other").json()["total"] == 0
    bad = client.get("/api/v1/incidents?limit=0")
    assert bad.status_code == 422 and set(bad.json()["error"]) == {"status", "kind", "message"}
    assert "/api/v1/incidents" in client.get("/api/v1/openapi.json").json()["paths"]


def test_incident_histograms_are_built_from_the_events(client_with_incidents: Any) -> None:
    client, _made = client_with_incidents
    s = _samples(client.get("/metrics").text)
    fs = (("symptom", "fail_stop"),)
    assert s[("rackscale_incident_detect_seconds_count", fs)] == 2
    assert s[("rackscale_incident_detect_seconds_sum", fs)] == pytest.approx(12.8)
    for b in BUCKETS:  # cumulative buckets: 0.8 and 12.0 seconds
        want = (b >= 0.8) + (b >= 12.0)
        le = (("le", floatToGoString(b)), ("symptom", "fail_stop"))
        assert s[("rackscale_incident_detect_seconds_bucket", le)] == want
    assert s[("rackscale_incident_restart_seconds_sum", fs)] == pytest.approx(44.0)
    assert s[("rackscale_incident_downtime_seconds_count", fs)] == 2
    # The straggler had no restart (no spare): it has a stop time but no restart histogram.
    sg = (("symptom", "straggler"),)
    assert s[("rackscale_incident_stop_seconds_count", sg)] == 1
    assert ("rackscale_incident_restart_seconds_count", sg) not in s
    assert s[("rackscale_incidents_total", (("outcome", "no_spare"), ("symptom", "straggler")))] \
        == 1
    assert s[("rackscale_incidents_total", (("outcome", "resumed"), ("symptom", "fail_stop")))] \
        == 2
    job = (("job_name", "train-1"),)
    assert s[("rackscale_job_incidents_total", job)] == 3
    assert s[("rackscale_job_last_incident_timestamp_seconds", job)] == 1.7e9 + 3


def test_dashboard_lists_incidents(client_with_incidents: Any) -> None:
    client, made = client_with_incidents
    html = client.get("/").text
    assert '<table id="incidents">' in html
    assert html.count("<tr data-incident=") == 3
    assert html.count('<li data-seq=') >= 3  # and in the live events
    assert made[1]["component"] in html and "no_spare" in html
    assert "no tiers config" in html  # started without --checkpoints


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ckpt")
    demo_checkpoint(root, lambda _m: None)  # two real saves, pushed through every tier
    path = root / "tiers.yaml"
    path.write_text(yaml.safe_dump(default_config(root).model_dump(mode="json")))
    return path


def test_checkpoints_api_and_rpo_gauges_match_checkpoint_ls(
        demo_db: Path, tmp_path: Path, tiers: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'c.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url, checkpoints=str(tiers)), store))
    body = client.get("/api/v1/checkpoints").json()
    ls = json.loads(subprocess.run(
        [sys.executable, "-m", "rackscale", "checkpoint", "ls", "--config", str(tiers),
         "--json"], check=True, capture_output=True, text=True, timeout=120).stdout)
    assert body["configured"] is True and body["total"] == 2 == len(ls["checkpoints"])
    assert [c["step"] for c in body["items"]] == [2000, 1000]  # newest first
    by_id = {c["id"]: c for c in ls["checkpoints"]}
    for c in body["items"]:
        assert c["states"] == by_id[c["id"]]["states"] and c["tiers"] == by_id[c["id"]]["tiers"]
        assert c["rpo_by_tier_s"]["region"] == pytest.approx(by_id[c["id"]]["rpo_s"])
        assert 0 <= c["rpo_by_tier_s"]["local"] <= c["rpo_by_tier_s"]["region"]
        assert c["basis"] == "measured"
    newest = body["items"][0]
    assert body["rpo_s"] == newest["rpo_by_tier_s"]
    assert set(body["rpo_s"]) >= {"local", "region", "replicated"}
    s = _samples(client.get("/metrics").text)
    for tier, v in body["rpo_s"].items():
        assert s[("rackscale_checkpoint_rpo_seconds", (("tier", tier),))] == pytest.approx(v)
    assert s[("rackscale_checkpoints", ())] == 2
    for tier, t in newest["states"].items():  # the newest checkpoint reached every tier
        assert s[("rackscale_checkpoint_last_timestamp_seconds", (("tier", tier),))] == \
            pytest.approx(t)
    page2 = client.get("/api/v1/checkpoints?offset=1&limit=1").json()
    assert [c["id"] for c in page2["items"]] == [body["items"][1]["id"]]
    html = client.get("/").text
    assert '<table id="checkpoints">' in html and html.count("<tr data-ckpt=") == 2


def test_checkpoints_unconfigured_and_bad_config(demo_db: Path, tmp_path: Path) -> None:
    store = Store(f"sqlite:///{copy_db(demo_db, tmp_path / 'u.db')}")
    client = TestClient(create_app(ServerConfig(db=store.url), store))
    body = client.get("/api/v1/checkpoints").json()
    assert body["configured"] is False and body["total"] == 0 and body["rpo_s"] == {}
    assert "rackscale_checkpoint_rpo_seconds" not in client.get("/metrics").text
    bad = tmp_path / "tiers.yaml"
    bad.write_text("local_dir: /tmp/x\nregion: {name: r, kind: nope}\n")
    proc = subprocess.run([sys.executable, "-m", "rackscale", "serve", "--db", store.url,
                           "--port", "0", "--checkpoints", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert str(bad) in proc.stderr and "region" in proc.stderr
    assert "Traceback" not in proc.stderr


@given(st.lists(st.tuples(st.sampled_from(["fail_stop", "hang", "straggler"]),
                          st.one_of(st.none(), st.floats(0, 7200, allow_nan=False))),
                max_size=40))
def test_incident_histograms_count_every_value_once(rows: list[tuple[str, float | None]]) -> None:
    fams = {f.name: f for f in incident_metrics(
        [{"symptom": sym, "detect_s": v, "outcome": "resumed"} for sym, v in rows])}
    s = {(x.name, tuple(sorted(x.labels.items()))): x.value
         for x in fams["rackscale_incident_detect_seconds"].samples}
    for sym in {sym for sym, _ in rows}:
        values = [v for sy, v in rows if sy == sym and v is not None]
        if not values:
            assert ("rackscale_incident_detect_seconds_count", (("symptom", sym),)) not in s
            continue
        counts = [s[("rackscale_incident_detect_seconds_bucket",
                     (("le", floatToGoString(b)), ("symptom", sym)))] for b in BUCKETS]
        assert counts == sorted(counts)  # cumulative
        assert counts == [sum(v <= b for v in values) for b in BUCKETS]
        inf = (("le", "+Inf"), ("symptom", sym))
        assert s[("rackscale_incident_detect_seconds_bucket", inf)] == len(values)
        assert s[("rackscale_incident_detect_seconds_sum", (("symptom", sym),))] == \
            pytest.approx(sum(values))
    total = sum(x.value for x in fams["rackscale_incidents"].samples
                if x.name == "rackscale_incidents_total")
    assert total == len(rows)


def test_an_incident_is_the_same_row_in_the_api_and_the_report(
        client_with_incidents: Any) -> None:
    """One function builds an incident's row: the API serves what the report's recovery
    section holds (restart cost, badput buckets, where it was measured), newest first."""
    from rackscale.incidents import RECOVERY_INCIDENT
    from rackscale.report.recovery import recovery_section

    client, _made = client_with_incidents
    store = client.app.state.store
    served = client.get("/api/v1/incidents").json()["items"]
    section = recovery_section([e.as_dict() for e in store.events(kind=RECOVERY_INCIDENT)])
    assert served == section["incidents"][::-1]
    assert served[-1]["restart_cost_s"] == pytest.approx(0.8 + 4.0 + 3.1)
    assert served[-1]["badput_s"]["detection"] == 0.8
    assert served[0]["restart_cost_s"] is None  # the straggler had no spare: no restart
