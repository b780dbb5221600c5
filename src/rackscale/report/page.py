"""report.html: one self-contained page (inline CSS, PNG plots as data: URIs, no scripts,
no network), rendered from the report document alone."""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup

from rackscale.provenance import Provenance, basis_text
from rackscale.report import fmt, plots
from rackscale.report.html import table
from rackscale.report.page_changes import changes_section
from rackscale.report.page_events import coverage, lifecycle
from rackscale.report.page_fleet import (
    FINDINGS_SHOWN,
    FLEET_CSS,
    finding_groups,
    overview,
    rack_groups,
    rack_map,
)
from rackscale.report.palette import basis_class, palette_css
from rackscale.report.recovery import render_recovery
from rackscale.report.simulation import failure_goodput, read_simulation
from rackscale.report.soak import render_soak
from rackscale.report.statement_page import statement_html
from rackscale.report.storage import render_storage
from rackscale.report.templates import macro
from rackscale.store import CertifyRunV1, InvalidPayload, carried_payload

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#212529;
background:#f8f9fa}
main{max-width:1180px;margin:0 auto;padding:16px 24px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:19px;margin:24px 0 10px;border-bottom:2px solid
#dee2e6;padding-bottom:4px}
.sub{color:#495057}.card{background:#fff;border:1px solid #dee2e6;border-radius:8px;padding:14px
;margin:10px 0}
table{border-collapse:collapse;width:100%;background:#fff}th,td{border-bottom:1px solid #e9ecef;
padding:5px 8px;text-align:left;vertical-align:top}th{background:#f1f3f5;font-weight:600}
caption{text-align:left;font-weight:600;padding:4px 0}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.headline td{background:#e7f5ff;font-weight:600}
.basis{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px}
.notrun{color:#5c636a;font-style:italic}
.warn{background:#fff3bf;border:1px solid #fcc419;border-radius:6px;padding:6px 10px;margin:6px 0}
img.plot{max-width:100%;height:auto;display:block}
.overview{display:grid;grid-template-columns:3fr 2fr;gap:12px;align-items:start}
.rack{background:#fff;border:1px solid #ced4da;border-radius:8px;padding:8px;width:205px}
.rack h3{font-size:13px;margin:0 0 4px}
.badge{font-size:11px;border-radius:8px;padding:0 6px}
.trays{display:grid;grid-template-columns:repeat(3,1fr);gap:3px}
.tray{height:22px;border-radius:3px;font-size:10px;text-align:center;line-height:22px;
border:2px solid transparent}
.tray.flagged{border:2px dashed #0072b2}.tray.finding{border:3px solid #d55e00;font-weight:700}
.tray.lost{background-image:repeating-linear-gradient(45deg,rgba(0,0,0,.22) 0 3px,transparent
3px 7px)}
.rackfind{font-size:11px;color:#a33b00;margin-top:4px}
.legend span{display:inline-block;margin:2px 8px 2px 0;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
vertical-align:-2px}
pre{white-space:pre-wrap;font-size:11px;margin:0;max-width:640px}
.stage-pass{background:#d3f9d8}.stage-miss{background:#ffe3e3}
ol.timeline{list-style:none;padding-left:8px;margin:4px 0}ol.timeline li{margin:2px 0}
ol.timeline details{display:inline-block;margin-left:6px}ol.timeline summary{font-size:12px;
cursor:pointer;color:#0b5394}
.better{color:#1b6e3a}.worse{color:#a33b00}
"""


T = "page.html"


def _fmt(n: float) -> str:
    return fmt.count(n)


def _basis(b: str) -> dict[str, str]:
    """A basis badge's data (the page.html macro `basis` draws it)."""
    return {"cls": basis_class(b), "text": basis_text(b)}


def _ci(ci: list[float] | None) -> list[str] | None:
    return [_fmt(ci[0]), _fmt(ci[1])] if ci else None


def _ledger(doc: dict[str, Any]) -> str:
    rows = []
    prev = None
    for s in doc["ledger"]:
        rows.append({"key": s["key"], "label": s["label"], "note": s["note"],
                     "count": _fmt(s["count"]), "ci": _ci(s.get("ci95")),
                     "delta": "" if prev is None else _fmt(round(prev - float(s["count"]), 1)),
                     "lost": [(code, _fmt(n)) for code, n in s["lost"].items() if n],
                     "basis": _basis(s["basis"]), "reason": s["reason"], "source": s["source"]})
        prev = float(s["count"])
    return table("ledger", ("step", "GPUs", "lost", "lost by reason",
                            "basis, reason and source"), macro(T, "ledger_rows", rows))


def _shapes(doc: dict[str, Any]) -> str:
    """The job shapes side by side; the row the headline uses is marked."""
    shapes = doc.get("job_shapes") or []
    if not shapes:
        return ""
    rows = [{"name": s["name"], "headline": s["headline"], "label": s["label"],
             "template": s["template"], "gpus_per_job": f'{s["gpus_per_job"]:,}',
             "jobs": f'{s["jobs"]:,}', "certified": _fmt(s["certified_gpus"]),
             "expected": _fmt(s["expected_gpus"]), "ci": _ci(s.get("expected_ci95")),
             "basis": _basis(s["basis"]), "goodput_basis": _basis(s["goodput_basis"])}
            for s in shapes]
    return (table("job-shapes", ("job shape", "rack template", "GPUs per job", "jobs that fit",
                                 "certified GPUs", "expected under failures",
                                 "basis (certified, goodput)"), macro(T, "shape_rows", rows),
                  caption="Job shapes side by side: certified GPUs and expected goodput for "
                  "each kind of job, from the same evidence")
            + macro(T, "shapes_note"))


EVIDENCE_KEYS = ("value", "unit", "rel", "reference", "baseline", "flow_lpm", "required_lpm")


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    """A finding's row: the headline numbers of its evidence, the whole of it folded below."""
    ev = f["evidence"]
    head = "; ".join(f"{k} {_num(ev[k])}" for k in EVIDENCE_KEYS if k in ev) or "evidence"
    return {"component": f["component"], "kind": f["kind"], "stage": str(f["stage"]),
            "verdict": str(f["verdict"]), "confidence": _num(f["confidence"]),
            "action": f["action"], "rule": f["rule"], "affected_gpus": f["affected_gpus"],
            "dropped_gpus": f["dropped_gpus"],
            "basis": _basis((Provenance.parse(f["backend"]) or Provenance.TWIN).basis),
            "head": head, "evidence": json.dumps(ev, separators=(", ", ": "), default=str)}


def _findings(doc: dict[str, Any]) -> str:
    if doc["certification"]["status"] == "not_run":
        return '<p class="notrun" id="findings">certification not run: no findings</p>'
    if not doc["findings"]:
        return '<p id="findings">the latest certification run found no faults</p>'
    ordered = sorted(doc["findings"], key=lambda f: (-f["dropped_gpus"], f["component"]))
    shown = ordered[:FINDINGS_SHOWN]
    more = "" if len(shown) == len(ordered) else (
        f" (the {len(shown)} that drop the most GPUs; all {len(ordered):,} are in report.json)")
    rows = table("findings", ("component", "kind", "stage", "verdict", "confidence",
                              "ledger rule", "GPUs affected / dropped at this step",
                              "basis", "evidence"),
                 macro(T, "finding_rows", [_finding(f) for f in shown]))
    return finding_groups(doc) + macro(T, "findings_all", len(ordered) <= 12, more,
                                       Markup(rows))


def _goodput(doc: dict[str, Any]) -> str:
    sim = doc["simulation"]
    if sim["status"] == "not_run":
        return ('<p class="notrun" id="goodput">simulation not run: no ETTR or goodput</p>'
                + _sweep(doc, {}))
    run = read_simulation(sim)
    if isinstance(run, InvalidPayload):
        return macro(T, "simulation_invalid", sim["seq"], str(run), Markup(_sweep(doc, {})))
    found = failure_goodput(run)
    ettr = "no ETTR in the run" if found is None else (
        fmt.number(found[0]) + ("" if found[1] is None else
                                " " + fmt.interval(*found[1])) + f" ({found[2]})")
    good = run.goodput.model_dump(exclude_none=True)
    good_ci = run.goodput_ci95 or {}
    goodput = ", ".join(
        f"{k} {fmt.plus_minus(v, good_ci[k]) if k in good_ci else _num(v)}"
        for k, v in good.items())
    facts = [("ETTR (mean, 95% CI)", ettr),
             ("goodput (mean ± 95% CI)", goodput or "—"),
             ("job", f"{run.job_gpus} GPUs for {run.days} days, {run.trials} trials"),
             ("job MTTF (h)", _num(run.job_mttf_h)),
             ("checkpoint interval (min)", run.ckpt_interval_min),
             ("Young / Daly interval (min)", f"{_num(run.young_min)} / {_num(run.daly_min)}"),
             ("failure model", run.failure_model), ("seed", run.seed),
             ("run", f'{run.run_id} (event seq {sim["seq"]})')]
    causes = run.interruptions_by_cause
    return macro(T, "goodput", {
        "basis": _basis("simulated"), "facts": facts,
        "causes": ", ".join(f"{k} {_num(v)}" for k, v in causes.items()) if causes else "",
        # A run may carry its own sweep (`sweep` beside the contract's fields,
        # docs/contracts.md).
        "sweep": Markup(_sweep(doc, {"sweep": (run.model_extra or {}).get("sweep")})),
        "lost": plots.lost_hours(run.lost_hours_by_cause)})


def _sweep(doc: dict[str, Any], run: dict[str, Any]) -> str:
    """The policy sweep: the fleet's latest recorded `simulate sweep`, else one carried inside
    the simulate.run payload."""
    rec = doc.get("sweep") or {"status": "not_run"}
    recorded = rec["status"] == "ran"
    sw = (rec.get("payload") or {}) if recorded else {}
    img = plots.ettr_sweep({"sweep": sw} if recorded else run)
    if not img:
        return ('<p class="notrun" id="sweep">no policy sweep recorded: run `rackscale simulate '
                'sweep --record`</p>')
    if not recorded:
        # a sweep carried inside the simulate.run: the plot alone, no optimum line
        return macro(T, "sweep", {"img": img, "recorded": False})
    best = sw.get("optimum") or {}
    return macro(T, "sweep", {
        "img": img, "param": str(sw.get("param")), "seq": rec["seq"],
        "over": ", ".join(_num(v) for v in sw.get("values") or []),
        "job_gpus": sw.get("job_gpus"), "trials": sw.get("trials"),
        "recorded": True, "optimum": _num(best.get("value")),
        "ettr": _num((best.get("ettr") or {}).get("mean")),
        "young": _num(sw.get("young_min")), "daly": _num(sw.get("daly_min"))})


def _num(v: Any) -> str:
    return fmt.number(v)


def _method(doc: dict[str, Any]) -> str:
    rows = macro(T, "method_rows", [m | {"basis": _basis(m["basis"])} for m in doc["method"]])
    reasons = macro(T, "reason_rows", list(doc["reasons"].items()))
    return (table("method", ("step", "how it is obtained", "basis", "inputs"), rows)
            + table("reason-codes", ("reason code", "what it means"), reasons,
                    caption="reason codes"))


def _summary(doc: dict[str, Any]) -> str:
    """The headline: what survives, for which job shape (named), and what it rests on."""
    fleet, ledger = doc["fleet"], doc["ledger"]
    final = ledger[-1]
    row = next((s for s in doc.get("job_shapes") or [] if s["headline"]), None)
    others = [s for s in doc.get("job_shapes") or [] if not s["headline"]]
    best = max(others, key=lambda s: s["expected_gpus"], default=None)
    cert_run = doc["certification"]
    return macro(T, "summary", {
        "fleet": fleet["fleet"], "headline_gpus": f'{fleet["headline_gpus"]:,}',
        "racks": f'{fleet["racks"]:,}', "regions": fleet["regions"],
        "certified": _fmt(next(s for s in ledger if s["key"] == "certified")["count"]),
        "shape": doc["job_shape"]["name"], "shape_label": row["label"] if row else None,
        "expected": _fmt(final["count"]), "basis": _basis(final["basis"]),
        # on a mixed fleet a shape covers one template's racks: its figure says so
        "best": None if best is None else best | {
            "expected": _fmt(best["expected_gpus"]),
            "pool": best["template"] if len(fleet["per_rack_template"]) > 1 else None},
        "cert": None if cert_run["status"] == "not_run" else {
            k: str(getattr(carried_payload(cert_run, CertifyRunV1), k))
            for k in ("run_id", "backend", "seed", "faults_file")},
        "store": doc["store"], "last_event_seq": doc["last_event_seq"],
        "generated": doc["generated_at"][:19], "warnings": doc["warnings"]})


def render_html(doc: dict[str, Any], statement: dict[str, Any] | None = None) -> str:
    """`statement`: the signature and verification status shown with the bundle hash. Every
    section arrives as HTML (Markup) from its own template; page.html places them."""
    groups = rack_groups(doc)
    sections = {
        "summary": _summary(doc), "statement": statement_html(doc, statement),
        "overview": overview(groups), "ledger": _ledger(doc), "shapes": _shapes(doc),
        "changes": changes_section(doc), "rack_map": rack_map(doc, groups),
        "findings": _findings(doc), "coverage": coverage(doc), "lifecycle": lifecycle(doc),
        "goodput": _goodput(doc), "storage": render_storage(doc.get("storage") or {}),
        "recovery": render_recovery(doc.get("recovery") or {}),
        "soak": render_soak(doc.get("soak") or {}), "method": _method(doc)}
    return macro(T, "page", {name: Markup(html) for name, html in sections.items()} | {
        "fleet": doc["fleet"]["fleet"], "waterfall": plots.waterfall(doc["ledger"]),
        # our own style sheet: HTML already (its `>` selectors must stay as they are)
        "css": Markup(CSS + FLEET_CSS + palette_css())})
