"""The live stream the dashboard listens to: server-sent events (text/event-stream) saying
what changed since the page was rendered, pushed as soon as the snapshot moves.

Each message (`event: change`, `id:` the newest event seq it covers) carries the racks whose
tile changed (all of them on the first message after a gap), the new events of the live kinds
(lifecycle transitions, findings, certification runs, incidents) and the new findings of the
latest certification run, in the same words the page renders them (views.py). A reconnecting
browser sends `Last-Event-ID` and gets what it missed. A stream ends itself after
STREAM_MAX_S (the browser reconnects at once), so no connection outlives a server stop by
more than that.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from rackscale.server import views
from rackscale.server.api import ERRORS, MAX_OFFSET, check_id, snapshot
from rackscale.server.errors import ApiError
from rackscale.server.snapshot import Snapshot
from rackscale.store import Store

router = APIRouter(prefix="/api/v1", responses=ERRORS)
STREAM_MAX_S = 300.0
KEEPALIVE_S = 15.0
EVENTS_PER_MESSAGE = 200  # the newest; a longer gap is summed up by the racks' tiles
RETRY_MS = 2000


def _tiles(snap: Snapshot) -> dict[str, dict[str, Any]]:
    return {r["id"]: views.tile(r) for r in snap.racks}


def change(store: Store, snap: Snapshot, after: int, rack: str | None,
           known: dict[str, dict[str, Any]], everything: bool) -> dict[str, Any]:
    """What changed between event `after` and the snapshot, for one stream (`known`: the tiles
    it last sent, updated here)."""
    tiles: dict[str, dict[str, Any]] = snap.derived("tiles", _tiles)
    if rack is not None:
        tiles = {rack: tiles[rack]} if rack in tiles else {}
    racks = {k: v for k, v in tiles.items() if everything or known.get(k) != v}
    known.update(tiles)
    evs = store.events(kinds=views.LIVE_KINDS, after_seq=after, until_seq=snap.seq,
                       prefix=rack, newest_first=True, limit=EVENTS_PER_MESSAGE)
    found = [f for f in snap.ledger.findings if int(f.get("seq") or 0) > after
             and (rack is None or f["component"] == rack
                  or f["component"].startswith(rack + "/"))]
    if rack is None:
        evs = [e for e in evs if views.fleet_event(e, snap)]
    return {"seq": snap.seq, "racks": racks,
            "events": [views.event(e) for e in reversed(evs)],
            "findings": [views.finding(f, snap.rack_index) for f in found],
            "findings_total": None if rack is not None else len(snap.ledger.findings)}


def _message(body: dict[str, Any]) -> str:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"id: {body['seq']}\nevent: change\ndata: {data}\n\n"


@router.get("/stream", summary="Live changes as server-sent events (text/event-stream)",
            response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "`event: change` messages; `id` is the event seq"}})
async def stream(request: Request,
                 after: int | None = Query(None, ge=0, le=MAX_OFFSET,
                                           description="The event seq the client has seen "
                                           "(default: now)."),
                 rack: str | None = Query(None, max_length=200,
                                          description="Only this rack's changes."),
                 max_s: float = Query(STREAM_MAX_S, gt=0, le=STREAM_MAX_S,
                                      description="End the stream after this many seconds "
                                      "(a browser reconnects by itself)."),
                 last_event_id: str | None = Header(None, max_length=20)) -> StreamingResponse:
    if rack is not None:
        check_id(rack)
    snap = await snapshot(request)
    if rack is not None and snap.rack(rack) is None:
        raise ApiError(404, f"no rack {rack!r} in fleet {snap.fleet}")
    if last_event_id is not None and last_event_id.isdigit():
        after = int(last_event_id)  # a reconnect: what it missed since the last message
    cache, store = request.app.state.cache, request.app.state.store
    interval = max(0.1, min(1.0, request.app.state.config.poll_s / 4))

    async def messages() -> AsyncIterator[str]:
        nonlocal snap
        seq = snap.seq if after is None else min(after, snap.seq)
        known: dict[str, dict[str, Any]] = {}
        first = seq < snap.seq  # the page is older than the snapshot: send it everything
        if not first:  # the tiles the page already shows
            tiles = snap.derived("tiles", _tiles)
            known.update(tiles if rack is None else {rack: tiles[rack]})
        yield f"retry: {RETRY_MS}\n\n"
        start = last = time.monotonic()
        while time.monotonic() - start < max_s:
            if await request.is_disconnected():
                return
            snap = cache.peek() or snap
            if snap.seq > seq:
                body = await run_in_threadpool(change, store, snap, seq, rack, known, first)
                first = False
                seq = snap.seq
                yield _message(body)
                last = time.monotonic()
            elif time.monotonic() - last >= KEEPALIVE_S:
                yield ": keepalive\n\n"
                last = time.monotonic()
            await asyncio.sleep(interval)

    return StreamingResponse(messages(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
