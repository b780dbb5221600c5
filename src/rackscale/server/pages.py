"""The dashboard: server-rendered HTML from Jinja2 templates (server/templates, autoescape on:
every value is escaped by the template engine, none by hand), no CDN, one small inline script
that takes the server's live stream (stream.py) and updates the open page in place.

What each page shows is built as plain data in views.py; the templates only lay it out.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined

from rackscale.fleet import is_within
from rackscale.inputs import shown
from rackscale.report import palette_css, state_class
from rackscale.server import views
from rackscale.server.api import check_id, snapshot
from rackscale.server.errors import ApiError
from rackscale.server.headers import page_policy
from rackscale.server.ops import RPO_STATES, incidents, rpo_by_tier
from rackscale.server.snapshot import Snapshot
from rackscale.store import Kind

router = APIRouter(include_in_schema=False)
STREAM_URL = "/api/v1/stream"
TIMELINE_SHOWN = 200

def _shown(value: Any) -> Any:
    """Every {{ value }} before autoescape: text has its control, bidi and zero-width
    characters written as escapes (an entity would still reorder the page); HTML passes."""
    return shown(value) if isinstance(value, str) and not hasattr(value, "__html__") else value


ENV = Environment(loader=PackageLoader("rackscale.server", "templates"), autoescape=True,
                  undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                  finalize=_shown)
ENV.globals.update(state_class=state_class, secs=views.secs)
_CSS = palette_css()


def render(name: str, request: Request, snap: Snapshot, **ctx: Any) -> HTMLResponse:
    # The page's own scripts run by a nonce of this answer; any other script (one that text
    # from the store smuggled into the page) does not run.
    nonce = secrets.token_urlsafe(16)
    html = ENV.get_template(name).render({"rack_id": None} | ctx, seq=snap.seq,
                                         stream_url=STREAM_URL, palette_css=_CSS,
                                         csp_nonce=nonce)
    return HTMLResponse(html, headers={"Content-Security-Policy": page_policy(nonce)})


def _checkpoints(listing: dict[str, Any]) -> dict[str, Any]:
    rows = listing["checkpoints"]
    rpo = rpo_by_tier(rows)
    return {"configured": listing["configured"], "rows": rows,
            "tiers": list(rows[0]["tiers"]) if rows else [],
            "rpo": ", ".join(f"{t} {rpo[t]:.2f} s" for t in RPO_STATES if t in rpo) or "—",
            "unreachable": sorted(listing["unreachable"].items())}


def index_html(snap: Snapshot, *, recent: list[dict[str, Any]],
               incident_rows: list[dict[str, Any]], checkpoints: dict[str, Any],
               nonce: str = "") -> str:
    """The fleet page of a snapshot (a pure function of its inputs: the scale test renders
    it for a 1,778-rack ledger without a store); `nonce` lets its scripts run (see render)."""
    steps = views.ledger(snap)
    found = snap.derived("findings-view", views.findings)
    return ENV.get_template("index.html").render(
        rack_id=None, seq=snap.seq, stream_url=STREAM_URL, palette_css=_CSS, csp_nonce=nonce,
        title=f"rackscale: {snap.fleet}", gpus=snap.gpu_total(), racks=len(snap.racks),
        map=views.fleet_map(snap), steps=steps, usable=steps[-1] if steps else {},
        findings=found, finding_kinds=views.finding_kinds(found),
        findings_open=views.FINDINGS_OPEN_UP_TO,
        findings_total=len(snap.ledger.findings), findings_limit=views.FINDINGS_SHOWN,
        recent=recent, incidents=incident_rows, ckpt=_checkpoints(checkpoints))


@router.get("/", response_class=HTMLResponse)
def index(request: Request, snap: Snapshot = Depends(snapshot)) -> HTMLResponse:
    store = request.app.state.store
    nonce = secrets.token_urlsafe(16)
    return HTMLResponse(index_html(snap, recent=views.recent_events(store, snap),
                                   incident_rows=incidents(store, snap),
                                   checkpoints=request.app.state.checkpoints.get(), nonce=nonce),
                        headers={"Content-Security-Policy": page_policy(nonce)})


def _under(cid: Any, rack_id: str) -> bool:
    return is_within(str(cid), rack_id)


@router.get("/racks/{rack_id:path}", response_class=HTMLResponse)
def rack_page(request: Request, rack_id: str = Path(..., max_length=200),
              snap: Snapshot = Depends(snapshot)) -> HTMLResponse:
    row = snap.rack(check_id(rack_id))
    if row is None:
        raise ApiError(404, f"no rack {rack_id!r} in fleet {snap.fleet}")
    store = request.app.state.store
    trays = [dict(t, conditions=[c for c in snap.conditions.get(t["id"], [])
                                 if c.get("status") != "True"]) for t in row["trays"]]
    # The rack's and its trays' transitions, in seq order.
    moves = store.events(prefix=rack_id, kind=Kind.LIFECYCLE_TRANSITION, until_seq=snap.seq)
    own_moves = [e for e in moves if e.component_id == rack_id]
    tray_moves = [e for e in moves if e.component_id != rack_id]
    own = [f for f in snap.ledger.findings if _under(f["component"], rack_id)]
    return render("rack.html", request, snap, title=f"rack {rack_id}", rack_id=rack_id,
                  rack=row, tile=views.tile(row), trays=trays,
                  conditions=[views.condition(c) for c in snap.conditions.get(rack_id, [])],
                  findings=views.findings(snap, own), findings_limit=views.FINDINGS_SHOWN,
                  timeline=[views.event(e) for e in own_moves[-TIMELINE_SHOWN:]],
                  timeline_cut=len(own_moves) if len(own_moves) > TIMELINE_SHOWN else 0,
                  tray_moves=[views.event(e) for e in tray_moves[-TIMELINE_SHOWN:]],
                  tray_moves_cut=len(tray_moves) if len(tray_moves) > TIMELINE_SHOWN else 0,
                  incidents=[r for r in incidents(store, snap)
                             if _under(r.get("component"), rack_id)])

