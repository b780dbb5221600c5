"""The fleet-scale parts of report.html: the rack map aggregated region -> rack group -> rack
with drill-down, worst first, and the findings grouped by kind and scope.

Nobody reads 1,778 rack cards: a large fleet shows every rack as a small chip and draws full
tray-level cards only for the worst racks; a small fleet (the seed) shows every card open.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from rackscale.fleet import id_name
from rackscale.report.html import table
from rackscale.report.palette import state_class
from rackscale.report.states import RACK_STATES
from rackscale.report.templates import macro

ALL_CARDS_UP_TO = 64  # racks: a fleet this small shows every rack card
CARDS_SHOWN = 120  # racks with full cards on a larger fleet (the worst ones)
GROUPS_PER_REGION = 24  # rack groups a region is split into at most, in the overview
TOP_OFFENDERS = 5
FINDINGS_SHOWN = 300

FLEET_CSS = """
.ov{display:flex;flex-wrap:wrap;gap:3px;margin:2px 0 6px}
.ov a{display:block;min-width:46px;padding:2px 4px;border-radius:3px;font-size:11px;
text-decoration:none;border:1px solid #555}
.lossbar{display:inline-block;height:8px;background:#d55e00;vertical-align:middle}
details.grp>summary{cursor:pointer;padding:4px 0;font-weight:600}
details.grp details.grp{margin-left:16px}
.racks{display:flex;flex-wrap:wrap;gap:12px;margin:6px 0}
.chips{display:flex;flex-wrap:wrap;gap:2px;margin:4px 0}
.chip{font-size:10px;padding:0 3px;border-radius:2px}
"""


def _powered_rack(state: str | None) -> bool:
    rule = RACK_STATES.get(state or "")
    return rule is None or rule.powered


@dataclass(slots=True)
class _Group:
    region: str
    label: str
    anchor: str
    racks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(r["gpus"] for r in self.racks)

    @property
    def usable(self) -> int:
        return sum(r["usable_gpus"] for r in self.racks)


def _worst_first(gs: list[_Group]) -> list[_Group]:
    """Groups by GPUs lost before certification, most first (the overview and the map)."""
    return sorted(gs, key=lambda g: (g.usable - g.gpus, g.anchor))


def _totals(gs: list[_Group]) -> tuple[int, int]:
    """(certified, all) GPUs of the groups."""
    return sum(g.usable for g in gs), sum(g.gpus for g in gs)


def _badness(r: dict[str, Any]) -> tuple[int, int, str]:
    """Sort key, worst first: GPUs lost, then findings, then the id (stable)."""
    return (-(r["gpus"] - r["usable_gpus"]),
            -(len(r["findings"]) + sum(bool(t["findings"]) for t in r["trays"])), r["id"])


def rack_groups(doc: dict[str, Any]) -> dict[str, list[_Group]]:
    """Racks by region, then in groups of neighbouring racks (whole leaf groups), at most
    GROUPS_PER_REGION groups per region."""
    by_region: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in doc["racks"]:
        by_region[r["region"]].append(r)
    per_leaf = int(doc.get("fleet", {}).get("racks_per_leaf") or 2)
    out: dict[str, list[_Group]] = {}
    for region, racks in by_region.items():
        leaves = -(-len(racks) // per_leaf)
        size = per_leaf * -(-leaves // GROUPS_PER_REGION)
        groups = []
        for i in range(0, len(racks), size):
            part = racks[i:i + size]
            first, last = id_name(part[0]["id"]), id_name(part[-1]["id"])
            lg = f"leaf group {i // per_leaf}" if size == per_leaf else \
                f"leaf groups {i // per_leaf}-{(i + len(part) - 1) // per_leaf}"
            groups.append(_Group(region=region, label=f"{lg} ({first}–{last})",
                                 anchor=f"g-{region}-{i // size}", racks=part))
        out[region] = groups
    return out


def fleet_groups(racks: list[dict[str, Any]], racks_per_leaf: int = 2
                 ) -> dict[str, list[_Group]]:
    """The fleet map's grouping for another page (the server's dashboard): per region its
    rack groups worst first, each group's racks worst first (GPUs lost, then findings)."""
    groups = rack_groups({"racks": racks, "fleet": {"racks_per_leaf": racks_per_leaf}})
    return {region: [_Group(region=g.region, label=g.label, anchor=g.anchor,
                            racks=sorted(g.racks, key=_badness)) for g in _worst_first(gs)]
            for region, gs in groups.items()}


def _overview_cls(g: _Group) -> str:
    share = g.usable / g.gpus if g.gpus else 0.0
    return "s-production" if share == 1 else ("s-degraded" if share >= 0.75 else
                                               ("s-triage" if share > 0 else "s-repair"))


def overview(groups: dict[str, list[_Group]]) -> str:
    """The first-screen map: per region one tile per rack group, worst first."""
    regions = []
    for region, gs in groups.items():
        usable, gpus = _totals(gs)
        regions.append({"name": region, "usable": usable, "gpus": gpus, "groups": [
            {"anchor": g.anchor, "label": g.label, "usable": g.usable, "gpus": g.gpus,
             "lost": g.gpus - g.usable, "racks": g.racks, "ov_cls": _overview_cls(g)}
            for g in _worst_first(gs)]})
    return macro("fleet_map.html", "overview", regions)


def _tray(t: dict[str, Any], rack_state: str | None) -> dict[str, Any]:
    # A rack that is not powered (maintenance, isolated, ...) takes its trays with it: they
    # are drawn in the rack's state, whatever state the trays last had.
    state = rack_state if not _powered_rack(rack_state) else (t["state"] or rack_state)
    cls = ["tray", state_class(state)]
    if t["findings"]:
        cls.append("finding")
    if t["healthy_gpus"] < t["gpus"]:
        cls.append("lost")
    if t["flagged"]:
        cls.append("flagged")
    tip = (f'{t["id"]}: {t["state"] or "(rack state)"}; healthy {t["healthy_gpus"]}/{t["gpus"]}'
           f', certified {t["usable_gpus"]}' + (f'; {", ".join(t["findings"])}'
                                                 if t["findings"] else ""))
    return t | {"cls": " ".join(cls), "tip": tip}


def _card(r: dict[str, Any]) -> dict[str, Any]:
    return r | {"cls": state_class(r["state"]),
                "trays": [_tray(t, r["state"]) for t in r["trays"]]}


def rack_card(r: dict[str, Any]) -> str:
    return macro("fleet_map.html", "card", _card(r))


def _chip(r: dict[str, Any]) -> dict[str, Any]:
    return {"id": r["id"], "name": id_name(r["id"]), "state": r["state"],
            "cls": state_class(r["state"]), "usable_gpus": r["usable_gpus"], "gpus": r["gpus"]}


def rack_map(doc: dict[str, Any], groups: dict[str, list[_Group]]) -> str:
    racks = doc["racks"]
    small = len(racks) <= ALL_CARDS_UP_TO
    worst = {r["id"] for r in sorted(racks, key=_badness)[:CARDS_SHOWN]
             if small or _badness(r)[:2] != (0, 0) or _powered_rack(r["state"]) is False}
    regions = []
    for region, gs in groups.items():
        parts = []
        for g in _worst_first(gs):
            ordered = sorted(g.racks, key=_badness)
            lost = g.gpus - g.usable
            parts.append({"anchor": g.anchor, "label": g.label, "usable": g.usable,
                          "gpus": g.gpus, "lost": lost, "open": bool(small or lost),
                          "cards": [_card(r) for r in ordered if small or r["id"] in worst],
                          "chips": [_chip(r) for r in ordered
                                    if not small and r["id"] not in worst]})
        usable, gpus = _totals(gs)
        states = Counter(r["state"] or "no state" for g in gs for r in g.racks)
        regions.append({"name": region, "usable": usable, "gpus": gpus, "groups": parts,
                        "states": ", ".join(f"{k} {v}" for k, v in states.most_common())})
    used = sorted({r["state"] for r in racks if r["state"]}
                  | {t["state"] for r in racks for t in r["trays"] if t["state"]})
    return macro("fleet_map.html", "rack_map", {
        "legend": [(s, state_class(s)) for s in used], "small": small, "worst": len(worst),
        "regions": regions})


def _scope(component: str, doc_fleet: str) -> str:
    """What a finding is on, in words: the last path part without its number (gpu, nic, s,
    cdu, leaf-rail...)."""
    if component == doc_fleet:
        return "fleet"
    last = id_name(component)
    base = last.rstrip("0123456789").rstrip("-")
    if base.startswith("leaf"):
        return "leaf"
    if base.startswith("spine"):
        return "spine"
    return {"c": "tray", "n": "node", "s": "switch tray", "ps": "power shelf"}.get(base, base)


def finding_groups(doc: dict[str, Any]) -> str:
    """Findings by (kind, scope): how many, GPUs dropped, the worst few components."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    fleet = doc["fleet"]["fleet"]
    for f in doc["findings"]:
        groups[(f["kind"], _scope(f["component"], fleet))].append(f)
    rows = []
    for (kind, scope), fs in sorted(groups.items(), key=lambda kv: (
            -sum(f["dropped_gpus"] for f in kv[1]), -len(kv[1]), kv[0])):
        top = sorted(fs, key=lambda f: (-f["dropped_gpus"], -f["affected_gpus"],
                                        f["component"]))[:TOP_OFFENDERS]
        verdicts = Counter(str(f["verdict"]) for f in fs)
        rows.append({"kind": kind, "scope": scope, "n": len(fs),
                     "verdicts": ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())),
                     "dropped": sum(f["dropped_gpus"] for f in fs),
                     "top": [f["component"] for f in top], "more": len(fs) - len(top)})
    body = macro("fleet_map.html", "finding_group_rows", rows)
    return table("finding-groups", ("kind", "scope", "findings", "verdicts", "GPUs dropped",
                                    "top offenders"), body,
                 caption="Findings by kind and scope, most GPUs dropped first")
