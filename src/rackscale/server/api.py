"""The versioned JSON API, /api/v1: fleet summary, racks, components, findings, certification
runs, the usable-capacity ledger, and the one mutation (drain a rack), which needs the token."""

from __future__ import annotations

import hmac
import re
from typing import Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rackscale.certify import FindingsFilter
from rackscale.fleet import is_within
from rackscale.inputs import control_characters
from rackscale.lifecycle import drain as drain_component
from rackscale.lifecycle import history
from rackscale.server.errors import ApiError
from rackscale.server.snapshot import Snapshot, SnapshotCache
from rackscale.store import Kind, Store

MAX_LIMIT = 500
MAX_OFFSET = 10**9
# Component ids are paths of plain segments (region/rack/tray/part). Every segment starts with
# a letter or digit, so "." and ".." (and empty segments, backslashes, NULs) never pass.
_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
ID_RE = re.compile(rf"^{_SEGMENT}(/{_SEGMENT}){{0,7}}$")


class ErrorDetail(BaseModel):
    status: int
    kind: str
    message: str


class ErrorBody(BaseModel):
    error: ErrorDetail


class DrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = Field(min_length=1, max_length=500, pattern=r"\S",
                        description="Why the rack is drained (recorded in its history); "
                        "printable text on one line, no control characters.")

    @field_validator("reason")
    @classmethod
    def _printable(cls, v: str) -> str:
        # A NUL is refused by PostgreSQL (a 500), an ESC sequence would reach the terminal of
        # whoever reads `lifecycle history`: refused here, as a 422.
        bad = control_characters(v)
        if bad:
            raise ValueError(f"control characters ({', '.join(dict.fromkeys(bad))}) are not "
                             "accepted in a drain reason")
        return v


class Page(BaseModel):
    items: list[dict[str, Any]]
    total: int
    offset: int
    limit: int


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (400, "Bad request"), (404, "Not found"), (422, "Invalid parameters"),
        (500, "Internal error"))
}
MUTATION_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text} for code, text in (
        (401, "Missing or wrong token"), (403, "Mutations are off (no token configured)"),
        (409, "Refused by the lifecycle rules"), (413, "Body too large"))
}

router = APIRouter(prefix="/api/v1", responses=ERRORS)
bearer = HTTPBearer(auto_error=False, description="The server's token (--token-file or "
                    "$RACKSCALE_SERVER_TOKEN).")

OffsetQ = Query(0, ge=0, le=MAX_OFFSET, description="Items to skip.")
LimitQ = Query(50, ge=1, le=MAX_LIMIT, description="Items per page.")


async def snapshot(request: Request) -> Snapshot:
    """The snapshot in memory, taken on the event loop (no thread hop, no store query); only
    the first build, before there is any, runs in a worker thread."""
    cache: SnapshotCache = request.app.state.cache
    snap = cache.peek()
    if snap is None:
        snap = await run_in_threadpool(cache.get)
    return snap


def json_bytes(request: Request, snap: Snapshot, body: bytes) -> Response:
    """A response whose body was serialized once per snapshot (Snapshot.encoded). The route's
    response_model still documents it in the OpenAPI schema; FastAPI does not re-validate a
    Response it is handed, which is the point (the body came from the same builders). The
    exact request target is remembered, so the next identical GET on this snapshot is
    answered before routing (app.HotReads)."""
    snap.remember(raw_target(request.scope), body)
    return Response(body, media_type="application/json")


def raw_target(scope: Any) -> str:
    return f"{scope['path']}?{scope['query_string'].decode('latin-1')}"


def check_id(cid: str) -> str:
    if len(cid) > 200 or not ID_RE.match(cid):
        raise ApiError(400, f"{cid[:80]!r} is not a component id: ids are paths of plain "
                       "segments like us-east/r01/c07/gpu2 (no '..', no empty segments)",
                       kind="bad_id")
    return cid


def require_token(request: Request,
                  cred: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
    token: str | None = request.app.state.config.token
    if token is None:
        raise ApiError(403, "this server was started without a token, so mutations are off; "
                       "restart it with --token-file PATH or $RACKSCALE_SERVER_TOKEN")
    given = cred.credentials if cred is not None else ""
    # Constant-time: the time a wrong guess takes says nothing about how close it was.
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        raise ApiError(401, "missing or wrong bearer token (Authorization: Bearer TOKEN)",
                       headers={"WWW-Authenticate": "Bearer"})


def page(items: list[Any], offset: int, limit: int) -> dict[str, Any]:
    return {"items": items[offset:offset + limit], "total": len(items), "offset": offset,
            "limit": limit}


def _rack_brief(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r[k] for k in ("id", "region", "template", "state", "gpus", "healthy_gpus",
                              "usable_gpus", "domains", "domains_healthy")} | {
        "findings": len(r["findings"]) + sum(len(t["findings"]) for t in r["trays"]),
        "trays_flagged": sum(1 for t in r["trays"] if t["flagged"])}


@router.get("/health", summary="Liveness and the newest event seen")
def health(request: Request) -> dict[str, Any]:
    return {"status": "ok", "seq": request.app.state.cache.newest_seq()}


def _briefs(snap: Snapshot) -> list[dict[str, Any]]:
    return [_rack_brief(r) for r in snap.racks]


# The hot reads (dashboards and scripts poll them) are `async`: served on the event loop from
# bytes serialized once per snapshot, they never wait for a worker thread.
@router.get("/summary", summary="Fleet summary: GPUs by lifecycle state, region and SKU",
            response_model=dict[str, Any])
async def summary(request: Request, snap: Snapshot = Depends(snapshot)) -> Response:
    return json_bytes(request, snap, snap.encoded("summary", _summary))


def _summary(snap: Snapshot) -> dict[str, Any]:
    by_state: dict[str, int] = {}
    for (state, _r, _s), n in snap.gpu_counts.items():
        by_state[state] = by_state.get(state, 0) + n
    racks_by_state: dict[str, int] = {}
    for r in snap.racks:
        key = r["state"] or "unenrolled"
        racks_by_state[key] = racks_by_state.get(key, 0) + 1
    last = snap.ledger.steps[-1]
    return {
        "fleet": snap.fleet, "seq": snap.seq, "gpus": snap.gpu_total(),
        "racks": len(snap.racks), "regions": sorted({r["region"] for r in snap.racks}),
        "gpus_by_state": by_state, "racks_by_state": racks_by_state,
        "gpus_by": [{"state": st, "region": rg, "sku": sku, "gpus": n}
                    for (st, rg, sku), n in sorted(snap.gpu_counts.items())],
        "findings": len(snap.ledger.findings),
        "usable": {"step": last.key, "gpus": last.count, "basis": last.basis},
    }


@router.get("/racks", summary="Racks with state, findings and capacity (paged)",
            response_model=Page)
async def racks(request: Request, snap: Snapshot = Depends(snapshot), offset: int = OffsetQ,
                limit: int = LimitQ, region: str | None = Query(None, max_length=64),
                state: str | None = Query(None, max_length=32)) -> Response:
    return json_bytes(request, snap, _racks_body(snap, offset, limit, region, state))


def _racks_body(snap: Snapshot, offset: int, limit: int, region: str | None,
                state: str | None) -> bytes:
    def build(s: Snapshot) -> dict[str, Any]:
        rows = [r for r in s.derived("briefs", _briefs)
                if (region is None or r["region"] == region)
                and (state is None or r["state"] == state)]
        return page(rows, offset, limit)

    return snap.encoded(f"racks:{(offset, limit, region, state)!r}", build)


@router.get("/racks/{rack_id:path}", summary="One rack: trays, findings and history")
def rack(request: Request, rack_id: str = Path(..., max_length=200),
         snap: Snapshot = Depends(snapshot)) -> dict[str, Any]:
    row = snap.rack(check_id(rack_id))
    if row is None:
        raise ApiError(404, f"no rack {rack_id!r} in fleet {snap.fleet}; list racks at "
                       "/api/v1/racks")
    store: Store = request.app.state.store
    hist = history(store, rack_id) if row["state"] is not None else []
    findings = [f for f in snap.ledger.findings
                if is_within(f["component"], rack_id)]
    trays = [dict(t, conditions=snap.conditions.get(t["id"], [])) for t in row["trays"]]
    return _rack_brief(row) | {"trays": trays, "findings_detail": findings,
                               "conditions": snap.conditions.get(rack_id, []),
                               "history": hist[-200:]}


@router.post("/racks/{rack_id:path}/drain", summary="Drain a rack (needs the token)",
             responses=MUTATION_ERRORS, dependencies=[Depends(require_token)])
def drain(request: Request, body: DrainRequest, rack_id: str = Path(..., max_length=200),
          snap: Snapshot = Depends(snapshot)) -> dict[str, Any]:
    if snap.rack(check_id(rack_id)) is None:
        raise ApiError(404, f"no rack {rack_id!r} in fleet {snap.fleet}")
    store: Store = request.app.state.store
    # the lifecycle's one drain rule; an unenrolled rack is a 404 in its own words
    t = drain_component(store, rack_id, actor="server", reason=body.reason)
    request.app.state.cache.get(wait=True)  # reads after this answer see the drain
    return {"component": rack_id, "from": t.src, "to": t.dst, "seq": t.seq}


@router.get("/components/{cid:path}", summary="One component with its history (paged)")
def component(request: Request, cid: str = Path(..., max_length=200), offset: int = OffsetQ,
              limit: int = LimitQ) -> dict[str, Any]:
    store: Store = request.app.state.store
    row = store.component(check_id(cid))
    if row is None:
        raise ApiError(404, f"no component {cid!r} in the inventory")
    events = [e.as_dict() for e in store.events(component_id=cid)]
    return {"id": row.id, "kind": row.kind, "parent": row.parent, "region": row.region,
            "rack": row.rack, "sku": row.sku, "attributes": row.attributes or {},
            "history": page(events, offset, limit)}


@router.get("/telemetry", summary="The server's GPU telemetry watch: its exporter pages, "
            "scrapes so far, the last scrape's report or error (serve --dcgm)")
def telemetry(request: Request) -> dict[str, Any]:
    watch = request.app.state.telemetry
    if watch is None:
        return {"status": "off", "why": "the server was started without --dcgm"}
    status: dict[str, Any] = watch.status()
    return {"status": "on"} | status


@router.get("/findings", summary="Findings of the latest certification run (paged)",
            response_model=Page)
def findings(snap: Snapshot = Depends(snapshot), offset: int = OffsetQ, limit: int = LimitQ,
             kind: str | None = Query(None, max_length=64),
             rack: str | None = Query(None, max_length=200),
             stage: str | None = Query(None, max_length=32)) -> dict[str, Any]:
    want = FindingsFilter(kind=kind, rack=rack, stage=stage)  # as `certify findings` filters
    rows = sorted((f for f in snap.ledger.findings
                   if want.matches(f["component"], f["kind"], f["stage"])),
                  key=lambda f: want.order(f["component"], f.get("seq")))
    return page(rows, offset, limit)


@router.get("/certify/runs", summary="Certification runs, newest first (paged)",
            response_model=Page)
def certify_runs(request: Request, offset: int = OffsetQ, limit: int = LimitQ) -> dict[str, Any]:
    store: Store = request.app.state.store
    runs = [e.as_dict() for e in store.events(kind=Kind.CERTIFY_RUN, newest_first=True)]
    return page(runs, offset, limit)


@router.get("/ledger", summary="The usable-capacity ledger (the report's own numbers)")
def ledger(snap: Snapshot = Depends(snapshot)) -> dict[str, Any]:
    return {"fleet": snap.fleet, "seq": snap.seq,
            "steps": [s.as_dict() for s in snap.ledger.steps],
            "warnings": snap.ledger.warnings}


@router.get("/live", summary="Small change feed the dashboard polls",
            response_model=dict[str, Any])
async def live(request: Request, snap: Snapshot = Depends(snapshot)) -> Response:
    return json_bytes(request, snap, snap.encoded("live", _live))


def warm(snap: Snapshot) -> None:
    """Serialize the hot responses of a new snapshot in the thread that built it, before any
    reader sees it, so no request pays for the first serialization on the event loop."""
    snap.encoded("summary", _summary)
    snap.encoded("live", _live)
    _racks_body(snap, 0, 50, None, None)  # the first page at the default limit


def _live(snap: Snapshot) -> dict[str, Any]:
    return {"seq": snap.seq, "racks": {r["id"]: {"state": r["state"],
                                                 "usable_gpus": r["usable_gpus"]}
                                       for r in snap.racks}}
