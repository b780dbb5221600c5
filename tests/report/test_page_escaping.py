"""Text that comes from the store, an operator or a file reaches report.html as text, never as
markup: a value planted with <script> and the quote characters in every field the page's
sections show (a drain reason and its actor, a finding's kind and evidence, an incident's job
and host, the evidence directory, a verification failure, a warning, a storage assumption, a
diff's rack change, a sweep's parameter...) comes out escaped, the way html.escape writes it,
and never raw."""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

from rackscale.fleet import Topology
from rackscale.report import build_report
from rackscale.report.page import render_html
from rackscale.store import NewEvent, Store

from .events import SEED_FAULTS, certify, onboard, simulate
from .test_recovery_section import GPU0, incident, record

_n = itertools.count()


def hostile() -> str:
    """A value no field may show raw; numbered, so each field's own value is looked for."""
    return f"""<script>alert({next(_n)})</script>"'&"""


def escaped(value: str) -> str:
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def _store_values(store: Store, topo: Topology, tmp: Path) -> list[str]:
    """Hostile values written to the store the way the rooms write them."""
    planted = [hostile() for _ in range(5)]
    onboard(store, topo)
    store.append_events([NewEvent(
        component_id=topo.racks[-1].id, kind="lifecycle.transition",
        payload={"from": "production", "to": "degraded"}, actor=planted[0],
        reason=f"drain: {planted[1]}")])
    certify(store, topo, [*SEED_FAULTS, {
        "component": "us-west/r02/c04/gpu1", "kind": "sdc", "verdict": "fail", "stage": 1,
        "confidence": 1.0, "evidence": {"check": planted[2]}}])
    simulate(store, topo)
    (tmp / "job").mkdir()
    record(store, tmp / "job", incident(GPU0, job=planted[3], host=planted[4]))
    return planted


def _plant(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Hostile values planted in the document's other text fields (what a store, a fleet spec
    or a file could put there)."""
    doc = copy.deepcopy(doc)
    planted: list[str] = []

    def put(value: str) -> str:
        planted.append(value)
        return value
    doc["fleet"]["fleet"] = put(hostile())
    doc["store"] = put(hostile())
    doc["warnings"].append(put(hostile()))
    doc["ledger"][1]["note"] = put(hostile())
    doc["ledger"][2]["source"] = put(hostile())
    doc["findings"][0]["kind"] = put(hostile())
    doc["method"][0]["how"] = put(hostile())
    doc["job_shapes"][0]["label"] = put(hostile())
    doc["evidence"] = {"root": put(hostile()), "files": 3, "dir": put(hostile())}
    doc["changes"] = {"empty": False, "old": {"generated_at": "2026-11-30T00:00:00",
                                              "last_event_seq": 1},
                      "ledger": [], "findings_new": [], "findings_cleared": [],
                      "job_shapes": [], "racks": [{
                          "id": put(hostile()), "change": put(hostile()),
                          "old_state": "production", "new_state": put(hostile()),
                          "old_usable": 72, "new_usable": 0}]}
    doc["sweep"] = {"status": "ran", "seq": 9, "payload": {
        "param": put(hostile()), "values": [5, 10], "optimum": {"value": 5.0},
        "points": [{"value": 5.0, "ettr": {"mean": 0.95}},
                   {"value": 10.0, "ettr": {"mean": 0.94}}]}}
    doc["storage"] = {
        "status": "ran", "job_gpus": 72, "days": 30, "trials": 20, "gpu_hour_price": 2.5,
        "reference_interval_min": 30, "buys_per_month": {put(hostile()): {}},
        "setups": {put(hostile()): {
            "optimal_interval_min": 10, "optimal_ettr": None, "young_min": 1.0,
            "daly_min": 1.0, "lost_gpu_hours_at_reference": None}},
        "measured": {"basis": put(hostile()), "figures": {put(hostile()): 1.5}},
        "assumptions": {"region": put(hostile())}}
    return doc, planted


def test_planted_values_are_escaped_in_every_section(fleet_store: Store, topo: Topology,
                                                     tmp_path: Path) -> None:
    from_store = _store_values(fleet_store, topo, tmp_path)
    doc, planted = _plant(build_report(fleet_store, tmp_path / "rep").doc)
    status = {"key_id": hostile(), "verified": False, "checked_at": "2026-12-01T00:00:00",
              "detail": hostile()}
    planted += [*from_store, status["key_id"], status["detail"]]
    html = render_html(doc, status)
    assert "<script" not in html
    for value in planted:
        assert value not in html
        # a finding's evidence is shown as JSON: its quote is \" before it is escaped
        shown = json.dumps(value)[1:-1] if value == from_store[2] else value
        assert escaped(shown) in html, value
    # one escaper for the whole page: html.escape's entities, which report.html always had
    assert "&#34;" not in html and "&#39;" not in html
