"""report.html: one self-contained page (inline CSS, PNG plots as data: URIs, no scripts,
no network), rendered from the report document alone."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from rackscale.provenance import Provenance
from rackscale.report import plots
from rackscale.report.ledger import failure_goodput
from rackscale.report.storage import render_storage

STATE_COLORS = {
    "production": "#2f9e44", "certified": "#40c057", "burn_in": "#74c0fc",
    "firmware": "#4dabf7", "powered": "#339af0", "onboard": "#a5d8ff", "seatrial": "#74c0fc",
    "degraded": "#fcc419", "draining": "#ffd43b", "triage": "#ff922b", "repair": "#e8590c",
    "maintenance": "#adb5bd", "isolated": "#c92a2a", "rma": "#862e9c", "retired": "#495057",
    "received": "#dee2e6", "cabled": "#ced4da", "cooling_verified": "#a9e34b",
}
NO_STATE = "#f1f3f5"
BASIS_TEXT = {"spec": "fleet spec", "inventory": "inventory", "measured": "measured (real)",
              "simulated": "simulated (twin)", "recorded": "recorded events",
              "not_run": "not run"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#212529;
background:#f8f9fa}
main{max-width:1180px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:19px;margin:28px 0 10px;border-bottom:2px solid
#dee2e6;padding-bottom:4px}
.sub{color:#495057}.card{background:#fff;border:1px solid #dee2e6;border-radius:8px;padding:14px
;margin:10px 0}
table{border-collapse:collapse;width:100%;background:#fff}th,td{border-bottom:1px solid #e9ecef;
padding:5px 8px;text-align:left;vertical-align:top}th{background:#f1f3f5;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.basis{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;color:#fff}
.b-spec,.b-inventory,.b-recorded{background:#4c6ef5}.b-measured{background:#2b8a3e}
.b-simulated{background:#e67700}.b-not_run{background:#868e96}
.notrun{color:#868e96;font-style:italic}
.warn{background:#fff3bf;border:1px solid #fcc419;border-radius:6px;padding:6px 10px;margin:6px 0}
img.plot{max-width:100%;height:auto;display:block}
#rack-map{display:flex;flex-wrap:wrap;gap:12px}
.rack{background:#fff;border:1px solid #ced4da;border-radius:8px;padding:8px;width:205px}
.rack h3{font-size:13px;margin:0 0 4px}
.badge{font-size:11px;border-radius:8px;padding:0 6px;color:#212529}
.trays{display:grid;grid-template-columns:repeat(3,1fr);gap:3px}
.tray{height:22px;border-radius:3px;font-size:10px;text-align:center;line-height:22px;
border:2px solid transparent;color:#212529}
.tray.flagged{border:2px dashed #f08c00}.tray.finding{border:2px solid #e03131;font-weight:700}
.tray.lost{background-image:repeating-linear-gradient(45deg,rgba(0,0,0,.18) 0 3px,transparent
3px 7px)}
.rackfind{font-size:11px;color:#c92a2a;margin-top:4px}
.legend span{display:inline-block;margin:2px 8px 2px 0;font-size:12px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;
vertical-align:-2px}
pre{white-space:pre-wrap;font-size:11px;margin:0;max-width:420px}
.stage-pass{background:#d3f9d8}.stage-miss{background:#ffe3e3}
"""


def _fmt(n: float) -> str:
    return f"{n:,.1f}" if float(n) % 1 else f"{int(n):,}"


def _basis(b: str) -> str:
    return f'<span class="basis b-{escape(b)}">{escape(BASIS_TEXT.get(b, b))}</span>'


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
            f'<td>{lost or "—"}</td><td><code>{escape(s["reason"])}</code></td>'
            f'<td>{_basis(s["basis"])}<br><small>{escape(s["source"])}</small></td></tr>')
        prev = float(s["count"])
    return ('<table id="ledger"><thead><tr><th>step</th><th>GPUs</th><th>lost</th>'
            '<th>lost by reason</th><th>reason</th><th>basis and source</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def _rack_map(doc: dict[str, Any]) -> str:
    cards = []
    for r in doc["racks"]:
        state = r["state"]
        rc = STATE_COLORS.get(state or "", NO_STATE)
        trays = []
        for t in r["trays"]:
            color = STATE_COLORS.get(t["state"] or state or "", NO_STATE)
            cls = ["tray"]
            if t["findings"]:
                cls.append("finding")
            if t["healthy_gpus"] < t["gpus"]:
                cls.append("lost")
            if t["flagged"]:
                cls.append("flagged")
            tip = (f'{t["id"]}: state {t["state"] or "(rack)"}; healthy {t["healthy_gpus"]}/'
                   f'{t["gpus"]}, certified {t["usable_gpus"]}; findings: '
                   f'{", ".join(t["findings"]) or "none"}; {json.dumps(t["reasons"])}')
            trays.append(f'<div class="{" ".join(cls)}" style="background-color:{color}" '
                         f'title="{escape(tip)}" data-tray="{escape(t["id"])}">'
                         f'{escape(t["name"])} {t["healthy_gpus"]}/{t["gpus"]}</div>')
        rf = "".join(f'<div class="rackfind">⚠ {escape(f)}</div>' for f in r["findings"])
        cards.append(
            f'<div class="rack" data-rack="{escape(r["id"])}"><h3>{escape(r["id"])} '
            f'<span class="badge" style="background:{rc}">{escape(state or "no state")}</span>'
            f'</h3><div class="sub" style="font-size:11px">healthy {r["healthy_gpus"]}/'
            f'{r["gpus"]} · certified {r["usable_gpus"]} ({r["domains_certified"]}/'
            f'{r["domains"]} domains)</div>'
            f'<div class="trays">{"".join(trays)}</div>{rf}</div>')
    used = sorted({r["state"] for r in doc["racks"] if r["state"]}
                  | {t["state"] for r in doc["racks"] for t in r["trays"] if t["state"]})
    legend = "".join(f'<span><i style="background:{STATE_COLORS.get(s, NO_STATE)}"></i>'
                     f'{escape(s)}</span>' for s in used)
    legend += (f'<span><i style="background:{NO_STATE}"></i>no lifecycle state</span>'
               '<span><i style="border:2px solid #e03131"></i>finding on the tray</span>'
               '<span><i style="border:2px dashed #f08c00"></i>flagged (degraded, counted)'
               '</span><span><i class="tray lost" style="background-color:#dee2e6"></i>'
               'GPUs not healthy (tray label: healthy/total)</span>')
    return f'<div class="legend">{legend}</div><div id="rack-map">{"".join(cards)}</div>'


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
    rows = "".join(
        f'<tr><td><code>{escape(f["component"])}</code></td><td>{escape(f["kind"])}</td>'
        f'<td>{escape(str(f["stage"]))}</td><td>{escape(str(f["verdict"]))}</td>'
        f'<td class="num">{escape(str(f["confidence"]))}</td><td>{escape(f["action"])}: '
        f'{escape(f["rule"])}</td><td class="num">{f["affected_gpus"]} / {f["dropped_gpus"]}</td>'
        f'<td>{_basis((Provenance.parse(f["backend"]) or Provenance.TWIN).basis)}</td>'
        f'<td>{_evidence(f["evidence"])}</td></tr>'
        for f in doc["findings"])
    return ('<table id="findings"><thead><tr><th>component</th><th>kind</th><th>stage</th>'
            '<th>verdict</th><th>confidence</th><th>ledger rule</th><th>GPUs affected / '
            'dropped at this step</th><th>basis</th><th>evidence</th></tr></thead>'
            f'<tbody>{rows}</tbody></table>')


def _coverage(doc: dict[str, Any]) -> str:
    cov = doc["coverage"]
    if cov["status"] == "not_run":
        return '<p class="notrun" id="coverage">certification not run: no stage ran anywhere</p>'
    racks = [r for r in cov["rows"] if r["kind"] == "rack"]
    by_rack: dict[str, list[dict[str, Any]]] = {}
    for t in cov["rows"]:
        if t["kind"] != "rack":
            by_rack.setdefault(t["component"].rsplit("/", 1)[0], []).append(t)
    stages = cov["stages"]
    head = "".join(f"<th>{escape(s)}</th>" for s in stages)
    body = []
    for r in racks:
        tr = by_rack.get(r["component"], [])
        cells = "".join(
            f'<td class="{"stage-pass" if s in r["stages_passed"] else "stage-miss"}">'
            f'{"rack ✓" if s in r["stages_passed"] else "rack –"}'
            f' · trays {sum(s in t["stages_passed"] for t in tr)}/{len(tr)}</td>'
            for s in stages)
        body.append(f'<tr><td><code>{escape(r["component"])}</code></td>'
                    f'<td>{escape(r["verdict"])}</td>{cells}</tr>')
    verdicts = ", ".join(f"{k}: {v}" for k, v in cov.get("verdicts", {}).items())
    return (f'<p>results: {escape(verdicts)}</p><table id="coverage"><thead><tr><th>rack</th>'
            f'<th>verdict</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>')


def _lifecycle(doc: dict[str, Any]) -> str:
    lc = doc["lifecycle"]
    if lc["status"] == "not_run":
        return '<p class="notrun" id="lifecycle">lifecycle not run: no lifecycle events</p>'
    counts = ", ".join(f"{k}: {v}" for k, v in lc["by_kind"].items())
    racks = ", ".join(f"{k}: {v}" for k, v in lc["rack_states"].items())
    trays = ", ".join(f"{k}: {v}" for k, v in lc["tray_states"].items()) or "none"
    shown = [e for e in lc["events"] if e["kind"] != "lifecycle.transition"
             or e["component"].count("/") <= 1][-60:]
    rows = "".join(
        f'<tr><td class="num">{e["seq"]}</td><td>{escape(e["time"][:19])}</td>'
        f'<td><code>{escape(e["component"])}</code></td><td>{escape(e["kind"])}</td>'
        f'<td>{escape(json.dumps(e["payload"], default=str))}</td>'
        f'<td>{escape(e["actor"])}: {escape(e["reason"])}</td></tr>' for e in shown)
    return (f'<p>{lc["events_total"]} events ({escape(counts)}). Racks by state: '
            f'{escape(racks)}. Trays by state: {escape(trays)}.</p><table id="lifecycle">'
            '<thead><tr><th>seq</th><th>time (UTC)</th><th>component</th><th>kind</th>'
            f'<th>payload</th><th>actor: reason</th></tr></thead><tbody>{rows}</tbody></table>'
            '<p class="sub">Rack transitions and all interlock and Slurm events, newest 60; '
            'tray transitions are counted above and kept in report.json.</p>')


def _goodput(doc: dict[str, Any]) -> str:
    sim = doc["simulation"]
    if sim["status"] == "not_run":
        return ('<p class="notrun" id="goodput">simulation not run: no ETTR or goodput</p>'
                + _sweep(doc, {}))
    p = sim["payload"]
    found = failure_goodput(p)
    ettr = "no ETTR in the run" if found is None else (
        f"{found[0]:.4f}" + ("" if found[1] is None else
                             f" [{found[1][0]:.4f}, {found[1][1]:.4f}]") + f" ({found[2]})")
    good = p.get("goodput") or {}
    good_ci = p.get("goodput_ci95") or {}
    goodput = ", ".join(
        f"{k} {_num(v)}" + (f" ± {_num(good_ci[k])}" if k in good_ci else "")
        for k, v in good.items())
    facts = [("ETTR (mean, 95% CI)", ettr),
             ("goodput (mean ± 95% CI)", goodput or "—"),
             ("job", f'{p.get("job_gpus")} GPUs for {p.get("days")} days, {p.get("trials")} '
                     'trials'),
             ("job MTTF (h)", _num(p.get("job_mttf_h"))),
             ("checkpoint interval (min)", p.get("ckpt_interval_min")),
             ("Young / Daly interval (min)",
              f'{_num(p.get("young_min"))} / {_num(p.get("daly_min"))}'),
             ("failure model", p.get("failure_model")), ("seed", p.get("seed")),
             ("run", f'{p.get("run_id")} (event seq {sim["seq"]})')]
    rows = "".join(f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in facts)
    imgs = _sweep(doc, p)
    lost = plots.lost_hours(p)
    if lost:
        imgs += f'<img class="plot" alt="hours lost by cause" src="data:image/png;base64,{lost}">'
    causes = p.get("interruptions_by_cause") or {}
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
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else str(v)


def _method(doc: dict[str, Any]) -> str:
    rows = "".join(f'<tr><td>{escape(m["step"])}</td><td>{escape(m["how"])}</td>'
                   f'<td>{_basis(m["basis"])}</td><td><small>{escape(m["source"])}</small></td>'
                   '</tr>' for m in doc["method"])
    reasons = "".join(f"<tr><td><code>{escape(k)}</code></td><td>{escape(v)}</td></tr>"
                      for k, v in doc["reasons"].items())
    return (f'<table id="method"><thead><tr><th>step</th><th>how it is obtained</th>'
            f'<th>basis</th><th>inputs</th></tr></thead><tbody>{rows}</tbody></table>'
            f'<h3>reason codes</h3><table><tbody>{reasons}</tbody></table>')


def render_html(doc: dict[str, Any]) -> str:
    fleet = doc["fleet"]
    ledger = doc["ledger"]
    final = ledger[-1]
    cert = next(s for s in ledger if s["key"] == "certified")
    warn = "".join(f'<div class="warn">{escape(w)}</div>' for w in doc["warnings"])
    wf = plots.waterfall(ledger)
    cert_run = doc["certification"]
    cert_line = "certification not run" if cert_run["status"] == "not_run" else (
        f'certify run {escape(str(cert_run["payload"].get("run_id")))} on backend '
        f'{escape(str(cert_run["payload"].get("backend")))}, seed '
        f'{escape(str(cert_run["payload"].get("seed")))}, faults file '
        f'{escape(str(cert_run["payload"].get("faults_file")))}')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>rackscale usable capacity: {escape(fleet["fleet"])}</title><style>{CSS}</style></head>
<body><main>
<header id="summary"><h1>Usable capacity of {escape(fleet["fleet"])}</h1>
<p class="sub">{fleet["headline_gpus"]:,} headline GPUs in {fleet["racks"]} racks,
{fleet["regions"]} regions → <b>{_fmt(cert["count"])}</b> certified for
{escape(doc["job_shape"]["name"])} →
<b>{_fmt(final["count"])}</b> expected after failures ({_basis(final["basis"])}).<br>
{cert_line}. Store {escape(doc["store"])}, events up to seq {doc["last_event_seq"]}, generated
{escape(doc["generated_at"][:19])} UTC.</p>{warn}</header>
<section><h2>Ledger: from headline to usable</h2><div class="card">
<img class="plot" id="waterfall" alt="ledger waterfall" src="data:image/png;base64,{wf}">
</div>{_ledger(doc)}</section>
<section><h2>Rack map (lifecycle state, findings)</h2><div class="card">{_rack_map(doc)}</div>
</section>
<section><h2>Findings</h2>{_findings(doc)}</section>
<section><h2>Certification coverage</h2>{_coverage(doc)}</section>
<section><h2>Lifecycle events</h2>{_lifecycle(doc)}</section>
<section><h2>ETTR and goodput</h2>{_goodput(doc)}</section>
<section><h2>Storage: what the local cache and replication buy</h2>
{render_storage(doc.get("storage") or {})}</section>
<section><h2>Method</h2>{_method(doc)}</section>
</main></body></html>
"""
