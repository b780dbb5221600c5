"""Certification coverage and the lifecycle timeline of report.html."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from rackscale.fleet import parent_id, path_below_rack, rack_path
from rackscale.report.templates import macro
from rackscale.store import (
    Event,
    LifecycleInterlockV1,
    LifecycleSlurmV1,
    LifecycleTransitionV1,
)

COVERAGE_ROWS_UP_TO = 64  # racks: a fleet this small lists every rack; larger, the gaps only
COVERAGE_ROWS_SHOWN = 100


def rack_verdict(verdict: str, missing: list[str]) -> str:
    """The verdict column of a coverage row: "pass" only when every stage of the run passed;
    a rack that passed its own checks but missed a stage says which."""
    if verdict == "pass" and missing:
        return f"partial: {', '.join(missing)} not passed"
    return verdict


def _coverage_row(r: dict[str, Any], trays: list[dict[str, Any]],
                  stages: list[str]) -> dict[str, Any]:
    missing = [s for s in stages if s not in r["stages_passed"]]
    return {"component": r["component"], "verdict": rack_verdict(r["verdict"], missing),
            "cells": [{"miss": s in missing, "trays": len(trays),
                       "passed": sum(s in t["stages_passed"] for t in trays)}
                      for s in stages]}


def coverage(doc: dict[str, Any]) -> str:
    """Stages passed per rack (templates/events.html): every rack of a small fleet, the gaps
    of a large one."""
    cov = doc["coverage"]
    if cov["status"] == "not_run":
        return '<p class="notrun" id="coverage">certification not run: no stage ran anywhere</p>'
    racks = [r for r in cov["rows"] if r["kind"] == "rack"]
    by_rack: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in cov["rows"]:
        if t["kind"] != "rack":
            by_rack[parent_id(t["component"])].append(t)
    stages = cov["stages"]
    passed_by_stage = {s: sum(s in r["stages_passed"] for r in racks) for s in stages}
    gaps = [r for r in racks if r["verdict"] != "pass"
            or any(s not in r["stages_passed"] for s in stages)]
    shown = racks if len(racks) <= COVERAGE_ROWS_UP_TO else gaps[:COVERAGE_ROWS_SHOWN]
    more = "" if len(shown) == len(racks) else (
        f'{len(racks) - len(gaps):,} racks passed every stage and are not '
        f'listed; {len(gaps):,} did not' + (f", the first {len(shown)} shown" if
                                           len(shown) < len(gaps) else "") + ".")
    run = doc.get("certification", {}).get("payload") or {}
    untested = run.get("untested") or []
    return macro("events.html", "coverage", {
        "untested": untested[:COVERAGE_ROWS_SHOWN], "untested_n": len(untested),
        "verdicts": ", ".join(f"{k}: {v}" for k, v in cov.get("verdicts", {}).items()),
        "per_stage": ", ".join(f"{s} {n}/{len(racks)}" for s, n in passed_by_stage.items()),
        "more": more, "stages": stages,
        "rows": [_coverage_row(r, by_rack.get(r["component"], []), stages) for r in shown]})


def _rack_of(component: str) -> str:
    return rack_path(component) or component


def _what(e: dict[str, Any]) -> str:
    """One event in words (its payload read through its kind's model)."""
    p = Event.from_dict(e).data
    part = path_below_rack(e["component"]) or "rack"
    if isinstance(p, LifecycleTransitionV1):
        return f"{part}: {p.from_ or '(new)'} → {p.to}"
    if isinstance(p, LifecycleInterlockV1):
        extra = "" if p.flow_lpm is None else \
            f" (flow {p.flow_lpm} of {p.required_lpm} L/min)"
        return f"{part}: interlock {p.rule}: {p.action}{extra}"
    if isinstance(p, LifecycleSlurmV1):
        return f"{part}: Slurm {p.action} {p.node}"
    return f"{part}: {e['kind'].removeprefix('lifecycle.')}"


def _event(e: dict[str, Any]) -> dict[str, Any]:
    return {"time": e["time"][:19].replace("T", " "), "what": _what(e), "actor": e["actor"],
            "reason": e["reason"], "seq": e["seq"], "raw": json.dumps(e, default=str)}


def lifecycle(doc: dict[str, Any]) -> str:
    """States by count, then the newest events as a timeline per rack (racks with the newest
    events first, each rack newest first), the raw event one click away
    (templates/events.html)."""
    lc = doc["lifecycle"]
    if lc["status"] == "not_run":
        return '<p class="notrun" id="lifecycle">lifecycle not run: no lifecycle events</p>'
    by_rack: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(lc["events"], key=lambda e: -e["seq"]):
        by_rack[_rack_of(e["component"])].append(_event(e))
    return macro("events.html", "lifecycle", {
        "total": f'{lc["events_total"]:,}',
        "counts": ", ".join(f"{k}: {v}" for k, v in lc["by_kind"].items()),
        "racks": ", ".join(f"{k}: {v}" for k, v in lc["rack_states"].items()),
        "trays": ", ".join(f"{k}: {v}" for k, v in lc["tray_states"].items()) or "none",
        "shown": len(lc["events"]),
        # insertion order: the rack with the newest event first
        "blocks": [{"rack": rack, "events": evs} for rack, evs in by_rack.items()]})
