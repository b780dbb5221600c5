"""The dashboard: server-rendered HTML, no CDN, one small inline script that polls /api/v1/live
and recolours the rack map when the event log moves (no reload)."""

from __future__ import annotations

from html import escape
from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse

from rackscale.lifecycle import history_events, moved
from rackscale.provenance import basis_text
from rackscale.server.api import check_id, snapshot
from rackscale.server.errors import ApiError
from rackscale.server.ops import RPO_STATES, incidents, rpo_by_tier
from rackscale.server.snapshot import Snapshot

router = APIRouter(include_in_schema=False)

# Colours by lifecycle state: green serving, amber degraded/being worked on, red out, grey new.
COLOURS = {"production": "#2e7d32", "certified": "#66bb6a", "degraded": "#f9a825",
           "draining": "#ef6c00", "burn_in": "#42a5f5", "firmware": "#64b5f6",
           "powered": "#90caf9", "cooling_verified": "#b3e5fc", "cabled": "#cfd8dc",
           "received": "#eceff1", "maintenance": "#8d6e63", "isolated": "#c62828",
           "rma": "#b71c1c", "retired": "#616161", "triage": "#e53935", "repair": "#8d6e63",
           "onboard": "#eceff1", "seatrial": "#cfd8dc"}
_CSS = "".join(f'[data-state="{s}"]{{background:{c}}}' for s, c in COLOURS.items()) + """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
.region{margin-bottom:1em}.map{display:flex;flex-wrap:wrap;gap:6px}
.rack{display:block;width:92px;padding:6px;border-radius:4px;color:#000;text-decoration:none;
 border:1px solid #999;position:relative;background:#fff}
.rack .st{font-size:11px}.rack .f{position:absolute;top:2px;right:4px;font-weight:bold;
 color:#fff;background:#b71c1c;border-radius:8px;padding:0 5px;font-size:11px}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;
 text-align:left}.bar{background:#1565c0;height:10px}.muted{color:#666}
.err{color:#b71c1c}.ok{color:#2e7d32}
"""
_SCRIPT = """
(function(){const poll=%POLL%;let seq=%SEQ%;
async function tick(){try{const r=await fetch('/api/v1/live');if(!r.ok)return;
const d=await r.json();document.getElementById('seq').textContent=d.seq;
for(const [id,v] of Object.entries(d.racks)){const el=document.querySelector(
'[data-rack="'+CSS.escape(id)+'"]');if(!el)continue;const s=v.state||'unenrolled';
if(el.dataset.state!==s){el.dataset.state=s;const t=el.querySelector('.st');if(t)t.textContent=s;}}
if(d.seq!==seq){seq=d.seq;document.dispatchEvent(new CustomEvent('rackscale:changed'));}
}catch(e){}}
setInterval(tick,poll);})();
"""
_DRAIN = """
document.getElementById('drain').addEventListener('submit',async function(ev){
ev.preventDefault();const f=ev.target,out=document.getElementById('drain-result');
const r=await fetch(f.dataset.url,{method:'POST',headers:{'Content-Type':'application/json',
'Authorization':'Bearer '+f.token.value},body:JSON.stringify({reason:f.reason.value})});
const d=await r.json();out.className=r.ok?'ok':'err';
out.textContent=r.ok?('drained: '+d.from+' -> '+d.to):('refused: '+d.error.message);});
"""


def _page(title: str, body: str, request: Request, seq: int, extra_js: str = "") -> HTMLResponse:
    poll_ms = int(request.app.state.config.poll_s * 1000)
    script = _SCRIPT.replace("%POLL%", str(poll_ms)).replace("%SEQ%", str(seq))
    html = (f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{escape(title)}</h1>{body}"
            f"<p class=muted>event seq <span id=seq>{seq}</span>; updates every "
            f"{poll_ms / 1000:g} s; <a href=/>fleet</a> · <a href=/metrics>metrics</a> · "
            f"<a href=/api/v1/openapi.json>API schema</a></p>"
            f"<script>{script}{extra_js}</script></body></html>")
    return HTMLResponse(html)


def _rack_tile(r: dict[str, Any]) -> str:
    n = len(r["findings"]) + sum(len(t["findings"]) for t in r["trays"])
    state = r["state"] or "unenrolled"
    badge = f'<span class=f title="findings">{n}</span>' if n else ""
    return (f'<a class=rack href="/racks/{escape(r["id"])}" data-rack="{escape(r["id"])}" '
            f'data-state="{escape(state)}" data-findings="{n}">{badge}'
            f'<b>{escape(r["id"].rsplit("/", 1)[-1])}</b><br><span class=st>{escape(state)}'
            f'</span><br>{r["usable_gpus"]}/{r["gpus"]} GPUs</a>')


def _waterfall(snap: Snapshot) -> str:
    top = max((s.count for s in snap.ledger.steps), default=1) or 1
    rows = "".join(
        f"<tr><td>{escape(s.label)}</td><td>{s.count:,.0f}</td><td>{escape(basis_text(s.basis))}</td>"
        f"<td style='width:220px'><div class=bar style='width:{200 * s.count / top:.0f}px'>"
        f"</div></td></tr>" for s in snap.ledger.steps)
    return ("<h2>Usable capacity</h2><table id=waterfall><tr><th>step</th><th>GPUs</th>"
            f"<th>basis</th><th></th></tr>{rows}</table>")


def _more(total: int, shown: int, url: str) -> str:
    """The line under a cut list: how many rows the page left out and where the API has them."""
    return f"<p class=muted>{total - shown} more at {url}</p>" if total > shown else ""


def _findings_table(rows: list[dict[str, Any]], limit: int = 200) -> str:
    body = "".join(
        f"<tr><td>{escape(f['component'])}</td><td>{escape(f['kind'])}</td>"
        f"<td>{escape(str(f['stage']))}</td><td>{escape(str(f['verdict']))}</td>"
        f"<td>{escape(str(f['confidence']))}</td><td>{escape(str(f['backend']))}</td>"
        f"<td><code>{escape(str(f['evidence']))[:300]}</code></td></tr>" for f in rows[:limit])
    more = _more(len(rows), limit, "/api/v1/findings")
    return ("<table id=findings><tr><th>component</th><th>kind</th><th>stage</th>"
            "<th>verdict</th><th>confidence</th><th>basis</th><th>evidence</th></tr>"
            f"{body}</table>{more}")


def _secs(v: Any) -> str:
    return f"{float(v):.2f} s" if v is not None else "-"


def _incidents_table(rows: list[dict[str, Any]], limit: int = 50) -> str:
    body = "".join(
        f"<tr data-seq='{r['seq']}'><td>{escape(r['time'][:19])}</td><td>{escape(str(r['job']))}"
        f"</td><td>{escape(str(r['symptom']))}</td><td>{escape(str(r['component']))}</td>"
        f"<td>{escape(str(r.get('spare')))}</td><td>{_secs(r.get('detect_s'))}</td>"
        f"<td>{_secs(r.get('restart_s'))}</td><td>{_secs(r.get('downtime_s'))}</td>"
        f"<td>{escape(str(r.get('work_lost_steps', '-')))}</td>"
        f"<td>{escape(str(r.get('outcome')))}</td></tr>" for r in rows[:limit])
    more = _more(len(rows), limit, "/api/v1/incidents")
    return (f"<h2>Incidents ({len(rows)})</h2><p class=muted>job recoveries, newest first; "
            "every time measured by the supervisor</p><table id=incidents><tr><th>time</th>"
            "<th>job</th><th>symptom</th><th>excluded</th><th>spare</th><th>detect</th>"
            "<th>restart</th><th>downtime</th><th>steps lost</th><th>outcome</th></tr>"
            f"{body}</table>{more}")


def _checkpoints_table(listing: dict[str, Any], limit: int = 20) -> str:
    if not listing["configured"]:
        return ("<h2>Checkpoints</h2><p class=muted>no tiers config: start the server with "
                "--checkpoints FILE to list checkpoints here</p>")
    rows = listing["checkpoints"]
    body = "".join(
        f"<tr data-ckpt='{escape(c['id'])}'><td>{escape(c['id'])}</td>"
        f"<td>{escape(str(c['step']))}</td><td>{escape(str(c['state']))}</td>"
        + "".join(f"<td>{escape(str(v))}</td>" for v in c["tiers"].values()) + "</tr>"
        for c in rows[:limit])
    tiers = list(rows[0]["tiers"]) if rows else []
    rpo = rpo_by_tier(rows)
    rpo_text = ", ".join(f"{t} {rpo[t]:.2f} s" for t in RPO_STATES if t in rpo) or "-"
    down = "".join(f"<p class=err>{escape(t)} unreachable: {escape(w)}</p>"
                   for t, w in listing["unreachable"].items())
    return (f"<h2>Checkpoints ({len(rows)})</h2><p>RPO of the newest checkpoint per tier "
            f"state (staged to committed there, measured): <span id=rpo>{escape(rpo_text)}"
            f"</span></p>{down}<table id=checkpoints><tr><th>id</th><th>step</th><th>state</th>"
            + "".join(f"<th>{escape(t)}</th>" for t in tiers) + f"</tr>{body}</table>")


@router.get("/", response_class=HTMLResponse)
def index(request: Request, snap: Snapshot = Depends(snapshot)) -> HTMLResponse:
    regions: dict[str, list[str]] = {}
    for r in snap.racks:
        regions.setdefault(r["region"], []).append(_rack_tile(r))
    maps = "".join(f"<div class=region><h3>{escape(name)}</h3><div class=map>{''.join(t)}"
                   "</div></div>" for name, t in regions.items())
    legend = " ".join(f'<span class=rack style="display:inline;width:auto" data-state="{s}">'
                      f"{s}</span>" for s in COLOURS)
    body = (f"<p>{snap.gpu_total():,} GPUs in {len(snap.racks)} racks; states are the "
            f"lifecycle's, figures from the store (basis per step below).</p>"
            f"<h2>Racks</h2><div id=rackmap>{maps}</div><p>{legend}</p>{_waterfall(snap)}"
            f"<h2>Findings ({len(snap.ledger.findings)})</h2>"
            f"{_findings_table(snap.ledger.findings)}"
            f"{_incidents_table(incidents(request.app.state.store, snap))}"
            f"{_checkpoints_table(request.app.state.checkpoints.get())}")
    return _page(f"rackscale: {snap.fleet}", body, request, snap.seq)


@router.get("/racks/{rack_id:path}", response_class=HTMLResponse)
def rack_page(request: Request, rack_id: str = Path(..., max_length=200),
              snap: Snapshot = Depends(snapshot)) -> HTMLResponse:
    row = snap.rack(check_id(rack_id))
    if row is None:
        raise ApiError(404, f"no rack {rack_id!r} in fleet {snap.fleet}")
    trays = "".join(
        f"<tr data-tray='{escape(t['id'])}' data-state='{escape(str(t['state']))}'>"
        f"<td>{escape(t['name'])}</td><td>{escape(str(t['state']))}</td>"
        f"<td>{t['usable_gpus']}/{t['gpus']}</td>"
        f"<td>{escape(', '.join(t['findings']))}</td></tr>" for t in row["trays"])
    hist = history_events(request.app.state.store, rack_id) if row["state"] is not None \
        else []
    hrows = "".join(
        f"<tr><td>{e.seq}</td><td>{escape(e.time.isoformat()[:19])}</td>"
        f"<td>{escape(e.kind)}</td><td>{' → '.join(escape(str(s)) for s in moved(e))}"
        f"</td><td>{escape(e.actor)}</td><td>{escape(e.reason)}</td></tr>"
        for e in hist[-100:])
    own = [f for f in snap.ledger.findings if f["component"].startswith(rack_id + "/")
           or f["component"] == rack_id]
    body = (f"<div class=map>{_rack_tile(row)}</div>"
            f"<p>region {escape(row['region'])}, template {escape(row['template'])}, "
            f"{row['usable_gpus']}/{row['gpus']} GPUs usable</p>"
            "<h2>Drain</h2><form id=drain data-url='/api/v1/racks/"
            f"{escape(rack_id)}/drain'><input name=reason placeholder=reason required> "
            "<input name=token type=password placeholder='server token' "
            "autocomplete=off> <button>Drain rack</button> <span id=drain-result></span>"
            "</form><h2>Trays</h2><table id=trays><tr><th>tray</th><th>state</th>"
            f"<th>usable GPUs</th><th>findings</th></tr>{trays}</table>"
            f"<h2>Findings</h2>{_findings_table(own)}"
            "<h2>History</h2><table id=history><tr><th>seq</th><th>time</th><th>kind</th>"
            f"<th>change</th><th>actor</th><th>reason</th></tr>{hrows}</table>")
    return _page(f"rack {rack_id}", body, request, snap.seq, _DRAIN)
