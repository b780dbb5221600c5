"""The report as one JSON document (report.json), validated against report.schema.json.

The HTML page is rendered from this document alone, so what a reader sees and what a program
reads are the same figures.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

from rackscale.report.ledger import Ledger, stage_name
from rackscale.report.reasons import describe
from rackscale.report.rules import FAULT_RULES
from rackscale.report.shapes import job_shapes
from rackscale.report.states import RACK_STATES, TRAY_STATES
from rackscale.report.storage import storage_section
from rackscale.report.storeview import StoreView
from rackscale.store import CertifyResultV1, CertifyRunV1, LifecycleTransitionV1

SCHEMA_VERSION = "rackscale.report/1"
LIFECYCLE_EVENTS_SHOWN = 200  # the newest ones; counts cover all of them


@cache
def report_schema() -> dict[str, Any]:
    """The published JSON Schema of report.json (package data)."""
    text = resources.files("rackscale.report").joinpath("report.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)  # the package's own schema: an object
    return schema


def _coverage(view: StoreView) -> dict[str, Any]:
    if view.certify_run is None:
        return {"status": "not_run", "stages": [], "rows": []}
    stages: list[str] = [stage_name(x) for x in view.certify_run.read(CertifyRunV1).stages]
    rows = []
    topo = view.topo
    for ev in view.results:
        p = ev.read(CertifyResultV1)
        passed = [stage_name(s) for s in p.stages_passed]
        for s in passed:
            if s not in stages:
                stages.append(s)
        kind = topo.kinds[topo.index[ev.component_id]] if ev.component_id in topo.index \
            else "unknown"
        rows.append({"component": ev.component_id, "kind": kind,
                     "verdict": p.verdict, "stages_passed": passed, "backend": p.backend})
    rows.sort(key=lambda r: (r["kind"] != "rack", r["component"]))
    return {"status": "ran", "stages": stages, "rows": rows,
            "verdicts": dict(Counter(r["verdict"] for r in rows))}


def _lifecycle(view: StoreView) -> dict[str, Any]:
    if not view.lifecycle_counts:
        return {"status": "not_run", "events_total": 0, "by_kind": {}, "rack_states": {},
                "tray_states": {}, "events": [], "interlocks": []}
    topo = view.topo
    rack_ids = {r.id for r in topo.racks}
    rack_states: Counter[str] = Counter()
    tray_states: Counter[str] = Counter()
    for cid, ev in view.states.items():
        to = ev.read(LifecycleTransitionV1).to
        (rack_states if cid in rack_ids else tray_states)[to] += 1
    interlocks = [e.as_dict() for e in view.interlocks]
    return {"status": "ran", "events_total": sum(view.lifecycle_counts.values()),
            "by_kind": dict(view.lifecycle_counts),
            "rack_states": dict(rack_states), "tray_states": dict(tray_states),
            "events": [e.as_dict() for e in view.lifecycle_events[-LIFECYCLE_EVENTS_SHOWN:]],
            "interlocks": interlocks}


def _run(ev: Any) -> dict[str, Any]:
    if ev is None:
        return {"status": "not_run"}
    return {"status": "ran", "seq": ev.seq, "time": ev.time.isoformat(), "actor": ev.actor,
            "payload": ev.payload}


def _method(ledger: Ledger) -> list[dict[str, str]]:
    shape = ledger.shape
    text = {
        "headline": "Count of GPUs in the loaded fleet spec, built into the topology.",
        "installed": "GPUs of the spec that have a row of kind gpu in the store's inventory.",
        "powered": "A GPU counts when its rack's latest lifecycle state is powered and in "
                   "service (" + ", ".join(k for k, v in RACK_STATES.items() if v.powered)
                   + ") and its tray's is not out (" + ", ".join(
                       k for k, v in TRAY_STATES.items() if not v.powered) + "). Without "
                   "lifecycle events the count is carried through and marked not run.",
        "healthy": "Each finding of the latest certify.run removes its blast radius "
                   "(Topology.affected_gpus) by fault-kind rule: " + "; ".join(
                       f"{k} {r.action}" for k, r in FAULT_RULES.items()) + ". A warn verdict "
                   "only flags. Trays the lifecycle holds in triage are also removed.",
        "domain": "GPUs whose whole NVLink domain survived the step above and has no "
                  "domain-wide finding (NVLink switch down or degraded).",
        "certified": ("Each rack's own whole NVLink domain (a whole NVL72 rack, a whole HGX "
                      "node)" if shape.gpus_per_domain is None else
                      f"Whole domains of {shape.gpus_per_domain} GPUs")
                     + " whose certify.result is pass with stages "
                     f"{', '.join(shape.required_stages) or '(none)'}.",
        "goodput": "Certified GPUs x ETTR of the latest simulate.run (digital twin with "
                   "failures, checkpoints, recovery): the share of wall time the job makes "
                   "progress. Program goodput (MFU) is not a failure loss and is not applied. "
                   "The 95% CI is the ETTR's over the simulated trials.",
    }
    return [{"step": s.key, "how": text[s.key], "basis": s.basis, "source": s.source}
            for s in ledger.steps]


def build_document(view: StoreView, ledger: Ledger, *, build_s: float | None = None,
                   generated_at: datetime | None = None) -> dict[str, Any]:
    topo = view.topo
    summary = topo.summary()
    codes = {s.reason for s in ledger.steps} | {c for s in ledger.steps for c in s.lost}
    doc: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "generated_at": (generated_at or datetime.now(UTC)).isoformat(),
        "store": view.store_url,
        "last_event_seq": view.last_seq,
        "fleet": {k: summary[k] for k in ("fleet", "regions", "racks", "headline_gpus",
                                          "peak_bf16_pflops", "per_rack_template")}
        | {"domains": len(topo.domains), "racks_per_leaf": topo.spec.network.racks_per_leaf},
        "job_shape": {"name": ledger.shape.name,
                      "gpus_per_domain": ledger.shape.gpus_per_domain,
                      "required_stages": list(ledger.shape.required_stages)},
        "ledger": [s.as_dict() for s in ledger.steps],
        "job_shapes": job_shapes(view, ledger),
        "reasons": {c: describe(c) for c in sorted(codes)},
        "racks": ledger.racks,
        "findings": ledger.findings,
        "coverage": _coverage(view),
        "lifecycle": _lifecycle(view),
        "certification": _run(view.certify_run),
        "simulation": _run(view.simulate_run),
        "sweep": _run(view.simulate_sweep),
        "storage": storage_section(view.storage_whatif),
        "method": _method(ledger),
        "warnings": ledger.warnings,
        "build_s": None if build_s is None else round(build_s, 3),
    }
    # Racks and coverage rows are built here from counts, ids and names only (no payload
    # floats): walking their ~600k values at 128k GPUs cost seconds for nothing.
    return {k: v if k in BUILT_FROM_COUNTS else finite(v) for k, v in doc.items()}


BUILT_FROM_COUNTS = frozenset({"racks", "coverage"})


def finite(obj: Any) -> Any:
    """The document with NaN and infinities as null: report.json is strict JSON (a job that
    never failed in the simulation has an infinite MTTF, which JSON cannot spell)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def validate_document(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `doc` does not match the published schema."""
    import jsonschema

    jsonschema.validate(doc, report_schema())
