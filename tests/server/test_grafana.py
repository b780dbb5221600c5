"""deploy/grafana/rackscale.json against a real scrape: `rackscale serve` (the seed demo's store
with recovery incidents and real checkpoint tiers) scraped by a real Prometheus that loads
deploy/prometheus/rackscale.rules.yml. Every panel's query, as Grafana would send it (template
variables substituted), returns data; the template variables find their values; the rules
evaluate without error on the real metrics, and the alerts the seed calls for are raised."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rackscale.checkpoint import default_config, demo_checkpoint
from rackscale.fleet import Topology, seed_fleet
from rackscale.recovery.record import Recorder
from rackscale.store import RecoveryIncidentV1, Store

from .conftest import Prometheus, Server, copy_db, prometheus, start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "rackscale.json"
RULES = ROOT / "deploy" / "prometheus" / "rackscale.rules.yml"
# Grafana's own variables, as it would fill them for a 6-hour view.
BUILTINS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "6h"}


def _incident(gpu: str, spare: str, attempt: int, at: float) -> RecoveryIncidentV1:
    return RecoveryIncidentV1(
        job="train-1", attempt=attempt, symptom="fail_stop", rank=attempt, component=gpu,
        fault_kind="", spare=spare, evidence={"last_beat_s": 1.5}, detected_at=at,
        detect_s=0.8 * attempt, localize_s=0.01, stop_s=0.4, restart_s=4.0, start_s=2.0,
        restore_s=0.3, first_step_s=3.1, downtime_s=7.1 * attempt, ckpt_id="ckpt-00000100",
        ckpt_step=100, work_lost_steps=7)


@pytest.fixture(scope="module")
def scraped(demo_db: Path, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[tuple[Server, Prometheus]]:
    tmp = tmp_path_factory.mktemp("grafana")
    db = copy_db(demo_db, tmp / "rackscale.db")
    store = Store(f"sqlite:///{db}")
    gpus = Topology.build(seed_fleet("seed-504")).gpu_ids
    rec = Recorder(tmp, store)
    now = time.time()  # the job recovered three times in the last minutes: its alert fires
    for i in range(3):
        inc = _incident(gpus[i], gpus[70 + i], i + 1, now - 300 + 60 * i)
        rec.incident(inc.model_copy(update={"fault_kind": rec.exclude(inc)}))
    store.close()
    demo_checkpoint(tmp / "ckpt", lambda _m: None)  # two real saves through every tier
    tiers = tmp / "tiers.yaml"
    tiers.write_text(yaml.safe_dump(default_config(tmp / "ckpt").model_dump(mode="json")))
    srv = start_server(db, tmp, extra=["--checkpoints", str(tiers)])
    try:
        with prometheus([srv], tmp, rule_files=[RULES]) as prom:
            yield srv, prom
    finally:
        stop_server(srv)


def _targets(panels: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in panels:
        yield from _targets(p.get("panels", []))  # a collapsed row holds its panels
        for t in p.get("targets", []):
            yield p, t


def _substitute(expr: str, variables: dict[str, str]) -> str:
    for name, value in sorted((variables | BUILTINS).items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace("${" + name.lstrip("$") + "}", value).replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


def _label_values(prom: Prometheus, query: str) -> list[str]:
    """Grafana's `label_values(selector, label)`, through the same API it uses."""
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
    assert m, f"not a label_values() query: {query}"
    return prom.api(f"label/{m.group(2)}/values", **{"match[]": m.group(1)})


def _has_data(result: list[dict[str, Any]]) -> bool:
    values = [float(r["value"][1]) for r in result]
    return bool(values) and all(math.isfinite(v) for v in values)


def test_every_panel_query_returns_data(scraped: tuple[Server, Prometheus]) -> None:
    srv, prom = scraped
    dash = json.loads(DASHBOARD.read_text())
    instance = srv.url.removeprefix("http://")
    # The template variables, as Grafana resolves them in order: each may use the ones before.
    variables: dict[str, str] = {}
    for var in dash["templating"]["list"]:
        if var["type"] == "datasource":
            assert var["query"] == "prometheus"
            continue
        query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
        found = _label_values(prom, _substitute(query, {f"${k}": v
                                                        for k, v in variables.items()}))
        assert found, f"template variable {var['name']} has no values"
        if var["name"] == "instance":
            assert instance in found
            variables["instance"] = instance
        else:
            variables[var["name"]] = var["allValue"] if var.get("includeAll") else found[0]
    subs = {f"${k}": v for k, v in variables.items()}

    targets = list(_targets(dash["panels"]))
    assert len(targets) >= 20
    titles = {p["title"] for p, _ in targets}
    empty = []
    deadline = time.monotonic() + 20  # a first scrape serves every metric; allow a few
    for panel, target in targets:
        assert panel["datasource"]["uid"] == target["datasource"]["uid"] == "${datasource}"
        expr = _substitute(target["expr"], subs)
        got = prom.query(expr)
        while not _has_data(got) and time.monotonic() < deadline:
            time.sleep(0.5)
            got = prom.query(expr)
        if not _has_data(got):
            empty.append(f"{panel['title']} [{target['refId']}]: {expr} -> {got}")
            continue
        if panel["type"] == "timeseries":  # what Grafana asks a graph for: a range
            end = time.time()
            rng = prom.api("query_range", query=expr, start=f"{end - 30:.3f}", end=f"{end:.3f}",
                           step="1")["result"]
            assert rng and rng[0]["values"], f"{panel['title']}: no range for {expr}"
    assert not empty, "panels without data:\n" + "\n".join(empty)
    # What the issue asks the dashboard to show.
    for want in ("Usable-capacity ledger over time", "Racks by state, per region", "Racks",
                 "Findings by kind (latest certification run)",
                 "Incident downtime (decision to first step)", "Checkpoint RPO per tier"):
        assert want in titles


def test_the_rules_run_on_the_real_metrics(scraped: tuple[Server, Prometheus]) -> None:
    srv, prom = scraped
    rules = yaml.safe_load(RULES.read_text())
    # Every rackscale metric a rule reads is one rackscale serve exports (no typo'd name).
    exported = set(prom.api("label/__name__/values"))
    for g in rules["groups"]:
        for r in g["rules"]:
            for name in set(re.findall(r"\brackscale_\w+", r["expr"])):
                assert name in exported, f"{r.get('alert') or r.get('record')}: {name}"
    # Each recorded series appears (the day-window quantile needs an incident in the window:
    # one whose histogram did not move in the run has none, by design).
    for g in rules["groups"]:
        for r in g["rules"]:
            if "record" in r and not r["record"].endswith("_1d"):
                prom.wait_for(r["record"], timeout_s=20)
    usable = prom.query("rackscale:fleet_usable_gpus:ratio")
    summary = srv.get("/api/v1/summary")[1]
    assert len(usable) == 1 and 0 < float(usable[0]["value"][1]) <= 1, (usable, summary)
    # Every rule evaluated without error.
    loaded = prom.api("rules")["groups"]
    assert {g["name"] for g in loaded} == {g["name"] for g in rules["groups"]}
    bad = [(r["name"], r.get("lastError")) for g in loaded for r in g["rules"]
           if r["health"] != "ok"]
    assert not bad, bad
    # The seed's fabric finding sits under serving racks: that alert is pending (it waits 15
    # minutes); the job that recovered three times in five minutes fires at once.
    fabric = prom.wait_for('ALERTS{alertname="RackscaleRackFabricUnhealthyWhileServing"}',
                           timeout_s=20)
    serving = {r["metric"]["rack"] for r in prom.query("rackscale_rack_serving == 1")}
    assert {a["metric"]["rack"] for a in fabric} <= serving
    assert {a["metric"]["alertstate"] for a in fabric} == {"pending"}
    job = prom.wait_for('ALERTS{alertname="RackscaleJobInRepeatedRecovery", '
                        'alertstate="firing"}', timeout_s=20)
    assert [a["metric"]["job_name"] for a in job] == ["train-1"]
    assert not prom.query('ALERTS{alertname=~"RackscaleTarget.*"}')


def test_the_dashboard_is_well_formed() -> None:
    """What Grafana's import needs and a reader expects: unique panel ids, panels inside the
    24-column grid that do not overlap, one data source input every query uses."""
    dash = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dash["__inputs"]] == ["DS_PROMETHEUS"]
    panels = [p for top in dash["panels"] for p in [top, *top.get("panels", [])]]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]
        if p["type"] == "row":
            continue
        assert p["title"] and p["description"], p
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"].strip() for t in p["targets"]), p["title"]
