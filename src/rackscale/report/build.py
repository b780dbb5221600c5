"""Build the report: read the store once, compute the ledger, write report.json and .html,
the disclosure and the evidence bundle that both can be recomputed from."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.report.bundle import EXTRA_EVENT_PREFIXES, RECOVERY_FILE
from rackscale.report.diff import with_history
from rackscale.report.ledger import JobShape, Ledger, build_ledger
from rackscale.report.page import render_html
from rackscale.report.statement import document_of, params_of, write_statement
from rackscale.report.storeview import StoreView, collect
from rackscale.store import Store

INDENT_UP_TO_RACKS = 64


@dataclass(slots=True, kw_only=True)
class BuiltReport:
    doc: dict[str, Any]
    ledger: Ledger
    html_path: Path
    json_path: Path
    seconds: float


def ledger_now(store: Store, *, shape: JobShape | None = None,
               fleet: str | None = None) -> tuple[StoreView, Ledger]:
    """The report's own read of the store and its ledger, for a front end that shows the
    ledger without writing a report (the server's dashboard and API, the demo's sizing): the
    numbers `report show` and `report build` print, by the same rule, never recomputed."""
    view = collect(store, fleet=fleet)
    return view, build_ledger(view, shape)


def report_document(store: Store, *, shape: JobShape | None = None,
                    fleet: str | None = None, gpu_hour_price: float | None = None,
                    until_seq: int | None = None) -> tuple[dict[str, Any], Ledger]:
    """The report document of the store now, or with `until_seq` of the store as it stood
    when that event was the newest (report/asof.py names such points)."""
    t0 = time.perf_counter()
    view = collect(store, fleet=fleet, until_seq=until_seq)
    params = params_of((shape or JobShape()).resolved(view.topo), gpu_hour_price)
    doc, ledger = document_of(view, params,
                              recovery=_recovery_events(_extra_events(store, until_seq)))
    doc["build_s"] = round(time.perf_counter() - t0, 3)
    return doc, ledger


def _extra_events(store: Store, until_seq: int | None = None) -> dict[str, list[Any]]:
    return {name: [e for p in prefixes for e in store.events(kind_prefix=p,
                                                             until_seq=until_seq)]
            for name, prefixes in EXTRA_EVENT_PREFIXES.items()}


def _recovery_events(extra: dict[str, list[Any]]) -> list[dict[str, Any]]:
    # The dict form the evidence bundle holds, so build and verify compute the same section.
    return [e.as_dict() for e in extra[RECOVERY_FILE]]


def build_report(store: Store, out_dir: str | Path, *, shape: JobShape | None = None,
                 fleet: str | None = None, gpu_hour_price: float | None = None,
                 extra: dict[str, Any] | None = None) -> BuiltReport:
    """`extra`: measured figures that live outside the store (the demo's checkpoint save and
    restore), added to the evidence bundle one file each."""
    t0 = time.perf_counter()
    view = collect(store, fleet=fleet)
    params = params_of((shape or JobShape()).resolved(view.topo), gpu_hour_price)
    extra_events = _extra_events(store)
    doc, ledger = document_of(view, params, recovery=_recovery_events(extra_events))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, html_path = out / "report.json", out / "report.html"
    with_history(doc, _previous(json_path, doc))
    write_statement(out, view, doc, params, extra=extra, extra_events=extra_events)
    html = render_html(doc)
    doc["build_s"] = round(time.perf_counter() - t0, 3)
    # A reader (a browser, the dashboard) never sees half a report, even after a crash, and
    # two builds never share a temp file.
    # Indented for a fleet a person may read raw; compact beyond, where indenting would
    # take Python's pure-Python encoder (seconds at 128k GPUs) for a file nobody reads by eye.
    indent = 2 if len(doc["racks"]) <= INDENT_UP_TO_RACKS else None
    write_atomic(json_path, json.dumps(doc, indent=indent, default=str, allow_nan=False) + "\n")
    write_atomic(html_path, html)
    return BuiltReport(doc=doc, ledger=ledger, html_path=html_path, json_path=json_path,
                       seconds=time.perf_counter() - t0)


def _previous(path: Path, doc: dict[str, Any]) -> dict[str, Any] | None:
    """The report this build replaces, when it is a report of the same fleet: the base of
    the "changes" section and of the capacity history. Anything else (no file, another
    fleet, a file that is not a report) starts the history afresh, and says so."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict) or not str(old.get("schema_version", "")).startswith(
            "rackscale.report/") or not isinstance(old.get("ledger"), list):
        doc["warnings"].append(f"{path} was not a report: no changes or history from it")
        return None
    if (old.get("fleet") or {}).get("fleet") != doc["fleet"]["fleet"]:
        return None
    return old
