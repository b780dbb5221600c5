"""What changed between two reports, and why: ledger deltas per step with the reason codes
behind them, findings new and cleared, racks that changed state or usable GPUs, job shapes.

Works on report documents (report.json) alone, so two reports written months apart, by
different versions, on different stores, can be compared. A report compared with itself
gives an empty diff.
"""

from __future__ import annotations

from typing import Any

from rackscale.errors import UserError
from rackscale.report.reasons import describe

HISTORY_KEPT = 20  # reports in the capacity history


class ReportDiffError(UserError):
    pass


def _check(doc: Any, name: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or not str(doc.get("schema_version", "")).startswith(
            "rackscale.report/"):
        raise ReportDiffError(f"{name}: not a rackscale report (no schema_version "
                              "rackscale.report/...); pass a report.json written by "
                              "`rackscale report build`")
    for key in ("ledger", "findings", "racks"):
        if not isinstance(doc.get(key), list):
            raise ReportDiffError(f"{name}: field {key!r} is missing or not a list; the file "
                                  "is not a complete report.json")
    return doc


def _round(x: float) -> float:
    return round(float(x), 1)


def _ledger(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    before = {s["key"]: s for s in old["ledger"]}
    out = []
    for s in new["ledger"]:
        o = before.get(s["key"])
        o_count = float(o["count"]) if o else 0.0
        o_lost = (o or {}).get("lost") or {}
        codes = sorted(set(o_lost) | set(s["lost"]))
        lost = {c: _round(float(s["lost"].get(c, 0)) - float(o_lost.get(c, 0))) for c in codes}
        lost = {c: d for c, d in lost.items() if d}
        delta = _round(float(s["count"]) - o_count)
        if delta or lost:
            out.append({"key": s["key"], "label": s["label"], "old": o_count,
                        "new": float(s["count"]), "delta": delta, "lost_delta": lost,
                        "why": {c: describe(c) for c in lost}})
    return out


def _finding_key(f: dict[str, Any]) -> tuple[str, str]:
    return str(f["component"]), str(f["kind"])


def _findings(old: dict[str, Any], new: dict[str, Any]) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]]]:
    o = {_finding_key(f): f for f in old["findings"]}
    n = {_finding_key(f): f for f in new["findings"]}

    def brief(f: dict[str, Any]) -> dict[str, Any]:
        return {k: f.get(k) for k in ("component", "kind", "verdict", "action",
                                      "dropped_gpus")}

    added = [brief(n[k]) for k in sorted(set(n) - set(o))]
    cleared = [brief(o[k]) for k in sorted(set(o) - set(n))]
    return added, cleared


def _racks(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    o = {r["id"]: r for r in old["racks"]}
    out = []
    for r in new["racks"]:
        p = o.get(r["id"])
        if p is None:
            out.append({"id": r["id"], "change": "added", "old_state": None,
                        "new_state": r["state"], "old_usable": 0, "new_usable": r["usable_gpus"]})
            continue
        if p["state"] != r["state"] or p["usable_gpus"] != r["usable_gpus"]:
            change = ("returned to production" if r["state"] == "production" != p["state"]
                      else "left production" if p["state"] == "production" != r["state"]
                      else "usable GPUs changed" if p["state"] == r["state"] else "state changed")
            out.append({"id": r["id"], "change": change, "old_state": p["state"],
                        "new_state": r["state"], "old_usable": p["usable_gpus"],
                        "new_usable": r["usable_gpus"]})
    gone = sorted(set(o) - {r["id"] for r in new["racks"]})
    out += [{"id": i, "change": "removed", "old_state": o[i]["state"], "new_state": None,
             "old_usable": o[i]["usable_gpus"], "new_usable": 0} for i in gone]
    return out


def _shapes(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    o = {(s["template"], s["name"]): s for s in old.get("job_shapes") or []}
    out = []
    for s in new.get("job_shapes") or []:
        p = o.get((s["template"], s["name"]))
        before = p["certified_gpus"] if p else 0
        if before != s["certified_gpus"]:
            out.append({"name": s["name"], "template": s["template"], "old": before,
                        "new": s["certified_gpus"], "delta": s["certified_gpus"] - before})
    return out


def _stamp(doc: dict[str, Any]) -> dict[str, Any]:
    return {"generated_at": doc.get("generated_at"), "last_event_seq": doc.get(
        "last_event_seq"), "fleet": (doc.get("fleet") or {}).get("fleet")}


def diff_documents(old: Any, new: Any) -> dict[str, Any]:
    """The changes from report `old` to report `new` (both report.json documents)."""
    old, new = _check(old, "OLD"), _check(new, "NEW")
    added, cleared = _findings(old, new)
    out: dict[str, Any] = {"old": _stamp(old), "new": _stamp(new), "ledger": _ledger(old, new),
           "findings_new": added, "findings_cleared": cleared, "racks": _racks(old, new),
           "job_shapes": _shapes(old, new)}
    out["empty"] = not any(out[k] for k in ("ledger", "findings_new", "findings_cleared",
                                            "racks", "job_shapes"))
    return out


def history_entry(doc: dict[str, Any]) -> dict[str, Any]:
    return {"generated_at": doc.get("generated_at"), "last_event_seq": doc.get(
        "last_event_seq"), "ledger": {s["key"]: s["count"] for s in doc["ledger"]}}


def with_history(doc: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """`doc` with the capacity history (the last HISTORY_KEPT reports, oldest first, this one
    last) and the changes since `previous` (the report this build replaces), when given."""
    past = []
    if previous is not None:
        past = [h for h in previous.get("history") or [] if isinstance(h, dict)]
        if not past or past[-1].get("generated_at") != previous.get("generated_at"):
            past.append(history_entry(previous))
        doc["changes"] = diff_documents(previous, doc)
    doc["history"] = [*past, history_entry(doc)][-HISTORY_KEPT:]
    return doc
