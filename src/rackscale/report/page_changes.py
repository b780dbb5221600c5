"""The "changes since the previous report" section and the capacity history plot."""

from __future__ import annotations

from html import escape
from typing import Any

from rackscale.report import fmt, plots
from rackscale.report.html import table

ROWS_SHOWN = 50  # per table; the rest are in report.json


def _signed(x: float) -> str:
    cls = "up" if x > 0 else "down"
    return f'<span class="{cls}">{"+" if x > 0 else "−"}{fmt.count(abs(x))}</span>'


def diff_tables(diff: dict[str, Any]) -> str:
    """The diff as HTML tables (also what `report diff` prints, in the terminal)."""
    if diff["empty"]:
        return '<p id="diff-empty">nothing changed: same ledger, findings, racks and shapes</p>'
    parts = []
    if diff["ledger"]:
        rows = "".join(
            f'<tr><td>{escape(s["label"])}</td><td class="num">{fmt.count(s["old"])}</td>'
            f'<td class="num">{fmt.count(s["new"])}</td><td class="num">{_signed(s["delta"])}'
            f'</td><td>' + "<br>".join(
                f'<code>{escape(c)}</code> lost {_signed(d)}: {escape(diff_why(s, c))}'
                for c, d in s["lost_delta"].items()) + "</td></tr>" for s in diff["ledger"])
        parts.append(table("diff-ledger", ("step", "before", "now", "change",
                                           "why (GPUs lost by reason, change)"), rows,
                           caption="Ledger steps that changed"))
    for key, title in (("findings_new", "New findings"), ("findings_cleared",
                                                          "Cleared findings")):
        fs = diff[key]
        if fs:
            rows = "".join(f'<tr><td><code>{escape(f["component"])}</code></td><td>'
                           f'{escape(f["kind"])}</td><td>{escape(str(f["verdict"]))}</td>'
                           f'<td class="num">{f["dropped_gpus"]}</td></tr>'
                           for f in fs[:ROWS_SHOWN])
            more = f" (first {ROWS_SHOWN} of {len(fs):,})" if len(fs) > ROWS_SHOWN else ""
            parts.append(table(f'diff-{key.replace("_", "-")}', ("component", "kind",
                                                                  "verdict", "GPUs dropped"),
                               rows, caption=title + more))
    if diff["racks"]:
        rows = "".join(f'<tr><td><code>{escape(r["id"])}</code></td><td>{escape(r["change"])}'
                       f'</td><td>{escape(str(r["old_state"]))} → {escape(str(r["new_state"]))}'
                       f'</td><td class="num">{r["old_usable"]} → {r["new_usable"]}</td></tr>'
                       for r in diff["racks"][:ROWS_SHOWN])
        parts.append(table("diff-racks", ("rack", "change", "state", "certified GPUs"), rows,
                           caption="Racks that changed"))
    if diff["job_shapes"]:
        rows = "".join(f'<tr><td><code>{escape(s["name"])}</code> ({escape(s["template"])})'
                       f'</td><td class="num">{s["old"]:,}</td><td class="num">{s["new"]:,}'
                       f'</td><td class="num">{_signed(s["delta"])}</td></tr>'
                       for s in diff["job_shapes"])
        parts.append(table("diff-shapes", ("shape", "before", "now", "change"), rows,
                           caption="Job shapes: certified GPUs"))
    return "".join(parts)


def diff_why(step: dict[str, Any], code: str) -> str:
    return str((step.get("why") or {}).get(code, ""))


def changes_section(doc: dict[str, Any]) -> str:
    history = doc.get("history") or []
    img = plots.history(history) if len(history) >= 2 else None
    plot = (f'<img class="plot" id="history" alt="usable GPUs per ledger step over the last '
            f'{len(history)} reports" src="data:image/png;base64,{img}">' if img else
            '<p class="notrun" id="history">no capacity history yet: the next build into '
            'this directory starts it</p>')
    diff = doc.get("changes")
    if diff is None:
        body = ('<p class="notrun" id="changes">no previous report in this directory to '
                'compare with</p>')
    else:
        when = escape(str(diff["old"]["generated_at"])[:19])
        body = (f'<p id="changes">since the report of {when}'
                f' UTC (events up to seq {diff["old"]["last_event_seq"]}):</p>'
                + diff_tables(diff))
    return f'<section><h2>Changes since the previous report</h2>{body}{plot}</section>'
