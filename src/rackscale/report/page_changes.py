"""The "changes since the previous report" section and the capacity history plot.

The markup is templates/changes.html (autoescape on); this module picks and formats the data."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from rackscale.report import fmt, plots
from rackscale.report.html import table
from rackscale.report.templates import macro

ROWS_SHOWN = 50  # per table; the rest are in report.json
T = "changes.html"


def _signed(x: float, *, more_is_better: bool = True) -> dict[str, str]:
    """A change as the page shows it: + or − by its direction, green when it is better and
    orange when worse (more usable GPUs is better; more GPUs lost to a reason is worse)."""
    better = x > 0 if more_is_better else x < 0
    return {"cls": "better" if better else "worse", "sign": "+" if x > 0 else "−",
            "n": fmt.count(abs(x))}


def _ledger_step(s: dict[str, Any]) -> dict[str, Any]:
    return {"label": s["label"], "old": fmt.count(s["old"]), "new": fmt.count(s["new"]),
            "delta": _signed(s["delta"]),
            "lost": [{"code": c, "delta": _signed(d, more_is_better=False),
                      "why": diff_why(s, c)}
                     for c, d in s["lost_delta"].items()]}


def _findings(diff: dict[str, Any]) -> list[str]:
    parts = []
    for key, title in (("findings_new", "New findings"), ("findings_cleared",
                                                          "Cleared findings")):
        fs = diff[key]
        if fs:
            rows = macro(T, "finding_rows", [f | {"verdict": str(f["verdict"])}
                                             for f in fs[:ROWS_SHOWN]])
            more = f" (first {ROWS_SHOWN} of {len(fs):,})" if len(fs) > ROWS_SHOWN else ""
            parts.append(table(f'diff-{key.replace("_", "-")}', ("component", "kind",
                                                                  "verdict", "GPUs dropped"),
                               rows, caption=title + more))
    return parts


def diff_tables(diff: dict[str, Any]) -> str:
    """The diff as HTML tables (also what `report diff` prints, in the terminal)."""
    if diff["empty"]:
        return '<p id="diff-empty">nothing changed: same ledger, findings, racks and shapes</p>'
    parts = []
    if diff["ledger"]:
        rows = macro(T, "ledger_rows", [_ledger_step(s) for s in diff["ledger"]])
        parts.append(table("diff-ledger", ("step", "before", "now", "change",
                                           "why (GPUs lost by reason, change)"), rows,
                           caption="Ledger steps that changed"))
    parts += _findings(diff)
    if diff["racks"]:
        rows = macro(T, "rack_rows", [r | {"old_state": str(r["old_state"]),
                                           "new_state": str(r["new_state"])}
                                      for r in diff["racks"][:ROWS_SHOWN]])
        parts.append(table("diff-racks", ("rack", "change", "state", "certified GPUs"), rows,
                           caption="Racks that changed"))
    if diff["job_shapes"]:
        rows = macro(T, "shape_rows", [s | {"old": f'{s["old"]:,}', "new": f'{s["new"]:,}',
                                            "delta": _signed(s["delta"])}
                                       for s in diff["job_shapes"]])
        parts.append(table("diff-shapes", ("shape", "before", "now", "change"), rows,
                           caption="Job shapes: certified GPUs"))
    return "".join(parts)


def diff_why(step: dict[str, Any], code: str) -> str:
    return str((step.get("why") or {}).get(code, ""))


def changes_section(doc: dict[str, Any]) -> str:
    history = doc.get("history") or []
    diff = doc.get("changes")
    return macro(T, "section", {
        "img": plots.history(history) if len(history) >= 2 else None,
        "reports": len(history), "diff": None if diff is None else Markup(diff_tables(diff)),
        "when": "" if diff is None else str(diff["old"]["generated_at"])[:19],
        "seq": None if diff is None else diff["old"]["last_event_seq"]})
