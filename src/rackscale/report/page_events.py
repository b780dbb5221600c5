"""Certification coverage and the lifecycle timeline of report.html."""

from __future__ import annotations

import json
from collections import defaultdict
from html import escape
from typing import Any

COVERAGE_ROWS_UP_TO = 64  # racks: a fleet this small lists every rack; larger, the gaps only
COVERAGE_ROWS_SHOWN = 100


def rack_verdict(verdict: str, missing: list[str]) -> str:
    """The verdict column of a coverage row: "pass" only when every stage of the run passed;
    a rack that passed its own checks but missed a stage says which."""
    if verdict == "pass" and missing:
        return f"partial: {', '.join(missing)} not passed"
    return verdict


def coverage(doc: dict[str, Any]) -> str:
    cov = doc["coverage"]
    if cov["status"] == "not_run":
        return '<p class="notrun" id="coverage">certification not run: no stage ran anywhere</p>'
    racks = [r for r in cov["rows"] if r["kind"] == "rack"]
    by_rack: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in cov["rows"]:
        if t["kind"] != "rack":
            by_rack[t["component"].rsplit("/", 1)[0]].append(t)
    stages = cov["stages"]
    passed_by_stage = {s: sum(s in r["stages_passed"] for r in racks) for s in stages}
    gaps = [r for r in racks if r["verdict"] != "pass"
            or any(s not in r["stages_passed"] for s in stages)]
    shown = racks if len(racks) <= COVERAGE_ROWS_UP_TO else gaps[:COVERAGE_ROWS_SHOWN]
    head = "".join(f'<th scope="col">{escape(s)}</th>' for s in stages)
    body = []
    for r in shown:
        tr = by_rack.get(r["component"], [])
        missing = [s for s in stages if s not in r["stages_passed"]]
        cells = "".join(
            f'<td class="{"stage-miss" if s in missing else "stage-pass"}">'
            f'{"rack ✗ not passed" if s in missing else "rack ✓"}'
            f' · trays {sum(s in t["stages_passed"] for t in tr)}/{len(tr)}</td>'
            for s in stages)
        body.append(f'<tr><td><code>{escape(r["component"])}</code></td>'
                    f'<td>{escape(rack_verdict(r["verdict"], missing))}</td>{cells}</tr>')
    verdicts = ", ".join(f"{k}: {v}" for k, v in cov.get("verdicts", {}).items())
    per_stage = ", ".join(f"{s} {n}/{len(racks)}" for s, n in passed_by_stage.items())
    more = "" if len(shown) == len(racks) else (
        f'<p class="sub">{len(racks) - len(gaps):,} racks passed every stage and are not '
        f'listed; {len(gaps):,} did not' + (f", the first {len(shown)} shown" if
                                           len(shown) < len(gaps) else "") + ".</p>")
    return (f'<p>results: {escape(verdicts)}. Racks that passed each stage: '
            f'{escape(per_stage)}.</p>{more}<table id="coverage"><thead><tr>'
            f'<th scope="col">rack</th><th scope="col">verdict</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _rack_of(component: str) -> str:
    parts = component.split("/")
    return "/".join(parts[:2]) if len(parts) >= 2 else component


def _what(e: dict[str, Any]) -> str:
    """One event in words."""
    p = e["payload"]
    part = e["component"].split("/", 2)[2] if e["component"].count("/") >= 2 else "rack"
    kind = e["kind"].removeprefix("lifecycle.")
    if kind == "transition":
        return f"{part}: {p.get('from') or '(new)'} → {p.get('to')}"
    if kind == "interlock":
        extra = ""
        if "flow_lpm" in p:
            extra = f" (flow {p.get('flow_lpm')} of {p.get('required_lpm')} L/min)"
        return f"{part}: interlock {p.get('rule')}: {p.get('action')}{extra}"
    if kind == "slurm":
        return f"{part}: Slurm {p.get('action')} {p.get('node') or ''}".rstrip()
    return f"{part}: {kind}"


def lifecycle(doc: dict[str, Any]) -> str:
    """States by count, then the newest events as a timeline per rack (racks with the newest
    events first, each rack newest first), the raw event one click away."""
    lc = doc["lifecycle"]
    if lc["status"] == "not_run":
        return '<p class="notrun" id="lifecycle">lifecycle not run: no lifecycle events</p>'
    counts = ", ".join(f"{k}: {v}" for k, v in lc["by_kind"].items())
    racks = ", ".join(f"{k}: {v}" for k, v in lc["rack_states"].items())
    trays = ", ".join(f"{k}: {v}" for k, v in lc["tray_states"].items()) or "none"
    by_rack: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(lc["events"], key=lambda e: -e["seq"]):
        by_rack[_rack_of(e["component"])].append(e)
    blocks = []
    for rack, evs in by_rack.items():  # insertion order: newest event first
        items = "".join(
            f'<li><time>{escape(e["time"][:19].replace("T", " "))}</time> '
            f'<span class="ev">{escape(_what(e))}</span> <span class="sub">'
            f'({escape(e["actor"])}{": " + escape(e["reason"]) if e["reason"] else ""}, seq '
            f'{e["seq"]})</span><details><summary>raw event</summary><pre>'
            f'{escape(json.dumps(e, default=str))}</pre></details></li>' for e in evs)
        blocks.append(f'<details class="grp" open><summary><code>{escape(rack)}</code>: '
                      f'{len(evs)} events, newest {escape(evs[0]["time"][:19].replace("T", " "))}'
                      f'</summary><ol class="timeline">{items}</ol></details>')
    return (f'<p>{lc["events_total"]:,} events ({escape(counts)}). Racks by state: '
            f'{escape(racks)}. Trays by state: {escape(trays)}.</p>'
            f'<p class="sub">The newest {len(lc["events"])} events by rack, newest first '
            '(times UTC); all of them are counted above.</p>'
            f'<div id="lifecycle">{"".join(blocks)}</div>')
