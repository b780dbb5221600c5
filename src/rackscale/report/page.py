"""report.html: one self-contained page (inline CSS, PNG plots as data: URIs, no scripts,
no network), rendered from the report document alone."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from rackscale.provenance import Provenance, basis_text
from rackscale.report import fmt, plots
from rackscale.report.html import table
from rackscale.report.ledger import failure_goodput
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
from rackscale.report.simulation import read_simulation
from rackscale.report.statement_page import statement_html
from rackscale.report.storage import render_storage
from rackscale.store import InvalidPayload

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
.up{color:#1b6e3a}.down{color:#a33b00}
"""


def _fmt(n: float) -> str:
    return fmt.count(n)


def _basis(b: str) -> str:
    return f'<span class="basis {basis_class(b)}">{escape(basis_text(b))}</span>'


def _ledger(doc: dict[str, Any]) -> str:
    rows = []
    prev = None
    for s in doc["ledger"]:
        delta = "" if prev is None else _fmt(round(prev - float(s["count"]), 1))
        lost = "<br>".join(
            f'{escape(code)}: {_fmt(n)}' for code, n in s["lost"].items() if n)
        ci = (f'<br><small>95% CI {_fmt(s["ci95"][0])} – {_fmt(s["ci95"][1])}</small>'
              if s.get("ci95") else "")
        note = f'<br><span class="notrun">{escape(s["note"])}</span>' if s["note"] else ""
        rows.append(
            f'<tr data-step="{escape(s["key"])}"><td>{escape(s["label"])}{note}</td>'
            f'<td class="num">{_fmt(s["count"])}{ci}</td><td class="num">{delta}</td>'
            f'<td>{lost or "—"}</td><td>{_basis(s["basis"])} <code>{escape(s["reason"])}</code>'
            f'<details><summary>source</summary><small>{escape(s["source"])}</small></details>'
            '</td></tr>')
        prev = float(s["count"])
    return table("ledger", ("step", "GPUs", "lost", "lost by reason",
                            "basis, reason and source"), "".join(rows))


def _shapes(doc: dict[str, Any]) -> str:
    """The job shapes side by side; the row the headline uses is marked."""
    shapes = doc.get("job_shapes") or []
    if not shapes:
        return ""
    rows = []
    for s in shapes:
        ci = (f'<br><small>95% CI {_fmt(s["expected_ci95"][0])} – '
              f'{_fmt(s["expected_ci95"][1])}</small>' if s.get("expected_ci95") else "")
        mark = " (headline)" if s["headline"] else ""
        cls = ' class="headline"' if s["headline"] else ""
        rows.append(
            f'<tr data-shape="{escape(s["name"])}"{cls}>'
            f'<td><code>{escape(s["name"])}</code>{escape(mark)}<br><small>'
            f'{escape(s["label"])}</small></td><td>{escape(s["template"])}</td>'
            f'<td class="num">{s["gpus_per_job"]:,}</td><td class="num">{s["jobs"]:,}</td>'
            f'<td class="num">{_fmt(s["certified_gpus"])}</td>'
            f'<td class="num">{_fmt(s["expected_gpus"])}{ci}</td>'
            f'<td>{_basis(s["basis"])} {_basis(s["goodput_basis"])}</td></tr>')
    return (table("job-shapes", ("job shape", "rack template", "GPUs per job", "jobs that fit",
                                 "certified GPUs", "expected under failures",
                                 "basis (certified, goodput)"), "".join(rows),
                  caption="Job shapes side by side: certified GPUs and expected goodput for "
                  "each kind of job, from the same evidence")
            + '<p class="sub">A domain shape needs its NVLink domain free of domain-wide '
            'findings and its certify.result passed; the "trays out" shapes run on the '
            'healthy trays of such a domain. Tray shapes count whole healthy trays (nodes) '
            'whose certify.result passed. Expected goodput applies the simulated ETTR of the '
            'latest simulation to every shape.</p>')


EVIDENCE_KEYS = ("value", "unit", "rel", "reference", "baseline", "flow_lpm", "required_lpm")


def _evidence(ev: dict[str, Any]) -> str:
    """The headline numbers of a finding's evidence, the whole of it folded below."""
    head = "; ".join(f"{k} {_num(ev[k])}" for k in EVIDENCE_KEYS if k in ev) or "evidence"
    body = escape(json.dumps(ev, separators=(", ", ": "), default=str))
    return f"<details><summary>{escape(head)}</summary><pre>{body}</pre></details>"


def _findings(doc: dict[str, Any]) -> str:
    if doc["certification"]["status"] == "not_run":
        return '<p class="notrun" id="findings">certification not run: no findings</p>'
    if not doc["findings"]:
        return '<p id="findings">the latest certification run found no faults</p>'
    ordered = sorted(doc["findings"], key=lambda f: (-f["dropped_gpus"], f["component"]))
    shown = ordered[:FINDINGS_SHOWN]
    rows = "".join(
        f'<tr><td><code>{escape(f["component"])}</code></td><td>{escape(f["kind"])}</td>'
        f'<td>{escape(str(f["stage"]))}</td><td>{escape(str(f["verdict"]))}</td>'
        f'<td class="num">{escape(_num(f["confidence"]))}</td><td>{escape(f["action"])}: '
        f'{escape(f["rule"])}</td><td class="num">{f["affected_gpus"]} / {f["dropped_gpus"]}</td>'
        f'<td>{_basis((Provenance.parse(f["backend"]) or Provenance.TWIN).basis)}</td>'
        f'<td>{_evidence(f["evidence"])}</td></tr>'
        for f in shown)
    more = "" if len(shown) == len(ordered) else (
        f" (the {len(shown)} that drop the most GPUs; all {len(ordered):,} are in report.json)")
    opened = " open" if len(ordered) <= 12 else ""
    return (finding_groups(doc) + f'<details id="findings-all"{opened}>'
            f'<summary>every finding with its evidence{escape(more)}</summary>'
            + table("findings", ("component", "kind", "stage", "verdict", "confidence",
                                 "ledger rule", "GPUs affected / dropped at this step",
                                 "basis", "evidence"), rows) + "</details>")


def _goodput(doc: dict[str, Any]) -> str:
    sim = doc["simulation"]
    if sim["status"] == "not_run":
        return ('<p class="notrun" id="goodput">simulation not run: no ETTR or goodput</p>'
                + _sweep(doc, {}))
    run = read_simulation(sim["payload"])
    if isinstance(run, InvalidPayload):
        return (f'<p class="notrun" id="goodput">simulate.run (event seq {sim["seq"]}) is not '
                f'applied: {escape(str(run))}</p>' + _sweep(doc, {}))
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
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in facts)
    # A run may carry its own sweep (`sweep` beside the contract's fields, docs/contracts.md).
    imgs = _sweep(doc, {"sweep": (run.model_extra or {}).get("sweep")})
    lost = plots.lost_hours(run.lost_hours_by_cause)
    if lost:
        imgs += f'<img class="plot" alt="hours lost by cause" src="data:image/png;base64,{lost}">'
    causes = run.interruptions_by_cause
    extra = ("<p>interruptions per run by cause: " + escape(", ".join(
        f"{k} {_num(v)}" for k, v in causes.items())) + "</p>") if causes else ""
    return (f'<p>{_basis("simulated")} digital-twin simulation; every figure here is '
            f'simulated.</p><table id="goodput">{rows}</table>{extra}{imgs}')


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
    text = ""
    if recorded:
        best = sw.get("optimum") or {}
        ettr = (best.get("ettr") or {}).get("mean")
        text = (f'<p id="sweep-optimum">sweep of {escape(str(sw.get("param")))} over '
                f'{escape(", ".join(_num(v) for v in sw.get("values") or []))} (event seq '
                f'{rec["seq"]}, {sw.get("job_gpus")} GPUs, {sw.get("trials")} trials): optimum '
                f'{escape(_num(best.get("value")))} with ETTR {escape(_num(ettr))}; Young / Daly '
                f'interval {_num(sw.get("young_min"))} / {_num(sw.get("daly_min"))} min</p>')
    return (text + f'<img class="plot" id="sweep" alt="ETTR by policy" '
            f'src="data:image/png;base64,{img}">')


def _num(v: Any) -> str:
    return fmt.number(v)


def _method(doc: dict[str, Any]) -> str:
    rows = "".join(f'<tr><td>{escape(m["step"])}</td><td>{escape(m["how"])}</td>'
                   f'<td>{_basis(m["basis"])}</td><td><small>{escape(m["source"])}</small></td>'
                   '</tr>' for m in doc["method"])
    reasons = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{escape(v)}</td></tr>"
                      for k, v in doc["reasons"].items())
    return (table("method", ("step", "how it is obtained", "basis", "inputs"), rows)
            + table("reason-codes", ("reason code", "what it means"), reasons,
                    caption="reason codes"))


def _summary(doc: dict[str, Any]) -> str:
    """The headline: what survives, for which job shape (named), and what it rests on."""
    fleet, ledger = doc["fleet"], doc["ledger"]
    final = ledger[-1]
    cert = next(s for s in ledger if s["key"] == "certified")
    shape = doc["job_shape"]
    row = next((s for s in doc.get("job_shapes") or [] if s["headline"]), None)
    what = f' ({escape(row["label"])})' if row else ""
    others = [s for s in doc.get("job_shapes") or [] if not s["headline"]]
    best = max(others, key=lambda s: s["expected_gpus"], default=None)
    also = "" if best is None else (
        f' Other shapes: up to <b>{_fmt(best["expected_gpus"])}</b> expected for '
        f'<code>{escape(best["name"])}</code> ({escape(best["label"])}); see job shapes.')
    cert_run = doc["certification"]
    cert_line = "certification not run" if cert_run["status"] == "not_run" else (
        f'certify run {escape(str(cert_run["payload"].get("run_id")))} on backend '
        f'{escape(str(cert_run["payload"].get("backend")))}, seed '
        f'{escape(str(cert_run["payload"].get("seed")))}, faults file '
        f'{escape(str(cert_run["payload"].get("faults_file")))}')
    warn = "".join(f'<div class="warn">{escape(w)}</div>' for w in doc["warnings"])
    return (f'<header id="summary"><h1>Usable capacity of {escape(fleet["fleet"])}</h1>'
            f'<p class="sub" id="headline">{fleet["headline_gpus"]:,} headline GPUs in '
            f'{fleet["racks"]:,} racks, {fleet["regions"]} regions → <b>{_fmt(cert["count"])}'
            f'</b> certified for job shape <b><code>{escape(shape["name"])}</code></b>{what} '
            f'→ <b>{_fmt(final["count"])}</b> expected after failures '
            f'({_basis(final["basis"])}).{also}<br>{cert_line}. Store {escape(doc["store"])}, '
            f'events up to seq {doc["last_event_seq"]}, generated '
            f'{escape(doc["generated_at"][:19])} UTC.</p>{warn}</header>')


def render_html(doc: dict[str, Any], statement: dict[str, Any] | None = None) -> str:
    """`statement`: the signature and verification status shown with the bundle hash."""
    fleet = doc["fleet"]
    wf = plots.waterfall(doc["ledger"])
    groups = rack_groups(doc)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rackscale usable capacity: {escape(fleet["fleet"])}</title>
<style>{CSS}{FLEET_CSS}{palette_css()}</style></head>
<body><main>
{_summary(doc)}
{statement_html(doc, statement)}
<section aria-label="overview"><div class="overview"><div class="card">
<img class="plot" id="waterfall" alt="ledger waterfall: GPUs left after each step, losses stacked
above each bar" src="data:image/png;base64,{wf}"></div>
<div class="card"><h2 style="margin-top:0;font-size:16px">Fleet map</h2>{overview(groups)}</div>
</div></section>
<section><h2>Ledger: from headline to usable</h2>{_ledger(doc)}</section>
<section><h2>Job shapes</h2>{_shapes(doc)}</section>
{changes_section(doc)}
<section><h2>Rack map (lifecycle state, findings)</h2><div class="card">
{rack_map(doc, groups)}</div></section>
<section><h2>Findings</h2>{_findings(doc)}</section>
<section><h2>Certification coverage</h2>{coverage(doc)}</section>
<section><h2>Lifecycle events</h2>{lifecycle(doc)}</section>
<section><h2>ETTR and goodput</h2>{_goodput(doc)}</section>
<section><h2>Storage: what the local cache and replication buy</h2>
{render_storage(doc.get("storage") or {})}</section>
<section><h2>Recovery: incidents of supervised jobs</h2>
{render_recovery(doc.get("recovery") or {})}</section>
<section><h2>Method</h2>{_method(doc)}</section>
</main></body></html>
"""
