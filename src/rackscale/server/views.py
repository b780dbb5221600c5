"""What the dashboard's templates show, as plain data: rack tiles, the fleet map grouped and
worst first, the usable-capacity ledger with basis and losses by reason, findings with their
evidence in words, lifecycle events. The live stream (stream.py) sends the same dicts, so a
row added live reads exactly like one rendered with the page.

Colours, basis labels, the grouping and the evidence wording are the report's
(`rackscale.report`): the dashboard and report.html never show a state or a basis two ways.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rackscale.fleet import id_name, rack_path
from rackscale.provenance import basis_text
from rackscale.report import (
    RACK_STATES,
    TRAY_STATES,
    basis_class,
    describe,
    evidence_facts,
    fleet_groups,
    state_class,
)
from rackscale.server.snapshot import Snapshot
from rackscale.store import (
    CertifyFindingV1,
    CertifyRunV1,
    Event,
    Kind,
    LifecycleTransitionV1,
    RecoveryIncidentV1,
)

ALL_TILES_UP_TO = 64  # racks: a fleet this small shows every rack as a tile
TILES_SHOWN = 120  # racks drawn as tiles on a larger fleet (the worst); the rest are chips
FINDINGS_SHOWN = 200
RECENT_EVENTS = 15
# Event kinds the live panel shows (a transition, a finding, a run, an incident).
LIVE_KINDS = (Kind.LIFECYCLE_TRANSITION, Kind.CERTIFY_FINDING, Kind.CERTIFY_RUN,
              Kind.RECOVERY_INCIDENT)
SERVING = frozenset({s for s, rule in RACK_STATES.items() if rule.powered})


def gpus_text(n: float) -> str:
    """A GPU count as the report writes it: whole GPUs plain, expected goodput to 0.1."""
    return f"{n:,.1f}" if float(n) % 1 else f"{int(n):,}"


def findings_of(r: dict[str, Any]) -> int:
    return len(r["findings"]) + sum(len(t["findings"]) for t in r["trays"])


def state_meaning(state: str | None) -> str:
    if state is None:
        return "no lifecycle state recorded"
    rule = RACK_STATES.get(state) or TRAY_STATES.get(state)
    return rule.meaning if rule else "a state this dashboard does not know"


def tile(r: dict[str, Any]) -> dict[str, Any]:
    """One rack as a tile: its state (as a word and a colour) and its usable fraction."""
    state = r["state"]
    gpus, usable = r["gpus"], r["usable_gpus"]
    return {"id": r["id"], "name": id_name(r["id"]), "region": r["region"],
            "state": state or "unenrolled", "label": state or "no state",
            "cls": state_class(state), "gpus": gpus, "usable": usable,
            "healthy": r["healthy_gpus"], "pct": round(100 * usable / gpus) if gpus else 0,
            "findings": findings_of(r), "meaning": state_meaning(state)}


def _badness(r: dict[str, Any]) -> tuple[int, int, str]:
    return (-(r["gpus"] - r["usable_gpus"]), -findings_of(r), r["id"])


def _worst(r: dict[str, Any]) -> bool:
    """Worth a tile on a large fleet: GPUs lost, a finding, or not in production."""
    return r["gpus"] > r["usable_gpus"] or findings_of(r) > 0 or r["state"] != "production"


def fleet_map(snap: Snapshot) -> dict[str, Any]:
    """Regions, each with its rack groups worst first (the report's fleet map). A small fleet
    shows every rack as a tile; a large one shows per region its worst racks as tiles (its
    share of TILES_SHOWN, by its racks: GPUs lost, findings, out of production), then every
    rack as a chip in its group (folded), listed under its state's name."""
    racks = snap.racks
    small = len(racks) <= ALL_TILES_UP_TO
    by_region = fleet_groups(racks, snap.racks_per_leaf)
    tiled: set[str] = set()
    for groups in by_region.values():  # each region its share of the tiles
        rr = [r for g in groups for r in g.racks]
        share = max(1, TILES_SHOWN * len(rr) // max(1, len(racks)))
        tiled |= {r["id"] for r in sorted(rr, key=_badness)[:share] if small or _worst(r)}
    regions = []
    for region, groups in by_region.items():
        gs = []
        for g in groups:
            chips: dict[str, list[dict[str, Any]]] = {}
            for r in g.racks:
                chips.setdefault(r["state"] or "no state", []).append(tile(r))
            lost = g.gpus - g.usable
            kept = g.usable / g.gpus if g.gpus else 0.0
            gs.append({"label": g.label, "anchor": g.anchor, "gpus": g.gpus, "usable": g.usable,
                       "lost": lost, "racks": len(g.racks),
                       "cls": state_class("production" if kept == 1 else "degraded"
                                          if kept >= 0.75 else "triage" if kept > 0
                                          else "repair"),
                       "chips": sorted(chips.items(), key=lambda kv: -len(kv[1]))})
        rr = sorted((r for g in groups for r in g.racks), key=_badness)
        states = Counter(r["state"] or "no state" for r in rr)
        regions.append({"name": region, "gpus": sum(r["gpus"] for r in rr),
                        "usable": sum(r["usable_gpus"] for r in rr),
                        "states": states.most_common(), "groups": gs,
                        "tiles": [tile(r) for r in rr if r["id"] in tiled]})
    used = sorted({r["state"] for r in racks if r["state"]})
    return {"small": small, "regions": regions, "tiled": len(tiled),
            "legend": [(s, state_class(s), state_meaning(s)) for s in used]
            + ([("no state", state_class(None), state_meaning(None))]
               if any(r["state"] is None for r in racks) else [])}


def ledger(snap: Snapshot) -> list[dict[str, Any]]:
    """The usable-capacity steps: a bar per step in its basis colour, the GPUs it dropped as a
    loss segment, and the losses by reason code in words."""
    steps = snap.ledger.steps
    top = max((s.count for s in steps), default=1) or 1
    rows, prev = [], None
    for s in steps:
        drop = 0.0 if prev is None else max(0.0, prev - s.count)
        rows.append({"key": s.key, "label": s.label, "count": gpus_text(s.count),
                     "basis": s.basis, "basis_label": basis_text(s.basis),
                     "basis_cls": basis_class(s.basis), "pct": round(100 * s.count / top, 1),
                     "loss_pct": round(100 * drop / top, 1),
                     "drop": gpus_text(round(drop, 1)) if drop else "",
                     "losses": [{"code": code, "gpus": gpus_text(n), "why": describe(code)}
                                for code, n in sorted(s.lost.items(), key=lambda kv: -kv[1])
                                if n],
                     "note": s.note, "source": s.source})
        prev = s.count
    return rows


def finding(f: dict[str, Any], racks: dict[str, int]) -> dict[str, Any]:
    """One finding with its evidence in words (report.evidence_facts)."""
    rack = rack_path(f["component"])
    rack = rack if rack in racks else None
    facts = evidence_facts(f)
    return {"seq": f.get("seq"), "component": f["component"], "rack": rack, "kind": f["kind"],
            "stage": str(f["stage"]), "verdict": str(f["verdict"]),
            "affected": f.get("affected_gpus"), "dropped": f.get("dropped_gpus"),
            "rule": f.get("rule") or "", "basis_cls": basis_class(facts.basis),
            **facts.as_dict()}


def findings(snap: Snapshot, rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    rows = snap.ledger.findings if rows is None else rows
    ordered = sorted(rows, key=lambda f: (-(f.get("dropped_gpus") or 0), f["component"]))
    return [finding(f, snap.rack_index) for f in ordered]


FINDINGS_OPEN_UP_TO = 20  # findings: more than this and the full table is folded
TOP_OFFENDERS = 5


def finding_kinds(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Findings by kind, most GPUs dropped first: how many, GPUs dropped, the worst few."""
    by: dict[str, list[dict[str, Any]]] = {}
    for f in rows:  # rows come worst first (findings())
        by.setdefault(f["kind"], []).append(f)
    out = [{"kind": k, "n": len(fs), "dropped": sum(f["dropped"] or 0 for f in fs),
            "verdicts": ", ".join(f"{v} {n}" for v, n in
                                  sorted(Counter(f["verdict"] for f in fs).items())),
            "top": fs[:TOP_OFFENDERS], "more": max(0, len(fs) - TOP_OFFENDERS)}
           for k, fs in by.items()]
    return sorted(out, key=lambda g: (-g["dropped"], -g["n"], g["kind"]))


def event(e: Event) -> dict[str, Any]:
    """One event of the live panel and the rack timeline, in words (its payload read through
    its kind's model)."""
    src: str | None = None
    dst: str | None = None
    if e.kind == Kind.LIFECYCLE_TRANSITION:
        moved = e.read(LifecycleTransitionV1)
        src, dst = moved.from_, moved.to
        text = f"{src} → {dst}"
    elif e.kind == Kind.CERTIFY_FINDING:
        found = e.read(CertifyFindingV1)
        text = f"finding {found.kind} ({found.verdict})"
    elif e.kind == Kind.CERTIFY_RUN:
        run = e.read(CertifyRunV1)
        text = f"certification run {run.run_id}: {run.findings} findings"
    elif e.kind == Kind.RECOVERY_INCIDENT:
        inc = e.read(RecoveryIncidentV1)
        text = f"incident: job {inc.job} {inc.symptom} ({inc.outcome})"
    else:
        text = e.kind
    return {"seq": e.seq, "time": e.time.isoformat()[:19].replace("T", " "), "kind": e.kind,
            "component": e.component_id, "text": text, "from": src, "to": dst,
            "from_cls": state_class(src), "to_cls": state_class(dst),
            "actor": e.actor or "", "reason": e.reason or ""}


def fleet_event(e: Event, snap: Snapshot) -> bool:
    """Shown in the fleet page's live panel: everything of the live kinds but a tray's
    transitions (a rack's bring-up moves 18 trays; the rack page lists those)."""
    return e.kind != Kind.LIFECYCLE_TRANSITION or e.component_id in snap.rack_index


def recent_events(store: Any, snap: Snapshot) -> list[dict[str, Any]]:
    """The newest events of the fleet panel up to the snapshot (memoized per snapshot)."""
    def build(_s: Snapshot) -> list[dict[str, Any]]:
        evs = [e for e in store.events(kinds=LIVE_KINDS, newest_first=True,
                                       limit=RECENT_EVENTS * 20, until_seq=snap.seq)
               if fleet_event(e, snap)]
        return [event(e) for e in evs[:RECENT_EVENTS]]

    return list(snap.derived("recent-events", build))


def secs(v: Any) -> str:
    return f"{float(v):.2f} s" if v is not None else "—"


def condition(c: dict[str, Any]) -> dict[str, Any]:
    ok = c.get("status") == "True"
    return {"type": c.get("type"), "status": c.get("status"), "ok": ok,
            "reason": c.get("reason") or "", "message": c.get("message") or "",
            "since": str(c.get("since") or "")[:19].replace("T", " "), "seq": c.get("seq")}
