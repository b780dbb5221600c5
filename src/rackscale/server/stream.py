"""The live stream the dashboard listens to: server-sent events (text/event-stream) saying
what changed since the page was rendered, pushed as soon as the snapshot moves.

Each message (`event: change`, `id:` the newest event seq it covers) carries the racks whose
tile changed (all of them on the first message after a gap), the new events of the live kinds
(lifecycle transitions, findings, certification runs, incidents) and the new findings of the
latest certification run, in the same words the page renders them (views.py). A reconnecting
browser sends `Last-Event-ID` and gets what it missed. A stream ends itself after
STREAM_MAX_S (the browser reconnects at once), so no connection outlives a server stop by
more than that, and after `stream_idle_s` without a change.

Streams are bounded: at most `max_streams` open in all (503 past it) and
`max_streams_per_client` from one client address (429), each refusal with `Retry-After`, so
a client that opens streams without end holds a few connections, not the server.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.background import BackgroundTask

from rackscale.fleet import is_within
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
RETRY_AFTER_S = 5  # what a refused stream is told to wait


class StreamSlots:
    """The open streams, in all and per client address. Used from the event loop only (the
    route and its stream are async), so the counts need no lock."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self.by_client: Counter[str] = Counter()

    @property
    def open(self) -> int:
        return sum(self.by_client.values())

    def take(self, client: str) -> Callable[[], None]:
        """A slot for `client`, or an ApiError (503: the server is full, 429: this client
        holds its share). Returns the slot's release, safe to call more than once."""
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        if self.by_client[client] >= self.per_client:
            raise ApiError(429, f"this client has {self.by_client[client]} live streams open, "
                           f"the most one client may; close one (a dashboard tab) or retry "
                           f"in {RETRY_AFTER_S} s", headers=retry)
        if self.open >= self.total:
            raise ApiError(503, f"the server has {self.open} live streams open, the most it "
                           f"serves; retry in {RETRY_AFTER_S} s", headers=retry)
        self.by_client[client] += 1
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.by_client[client] -= 1
                if self.by_client[client] <= 0:
                    del self.by_client[client]
        return release


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
             and (rack is None or is_within(f["component"], rack))]
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
    state = request.app.state
    cache, store, config = state.cache, state.store, state.config
    interval = max(0.1, min(1.0, config.poll_s / 4))
    # Taken last, after every check that can refuse; released when the stream ends, and by
    # the response's background task for a stream cancelled before its first message.
    release = state.streams.take(request.client.host if request.client else "")

    async def messages() -> AsyncIterator[str]:
        try:
            async for m in _messages():
                yield m
        finally:
            release()

    async def _messages() -> AsyncIterator[str]:
        nonlocal snap
        seq = snap.seq if after is None else min(after, snap.seq)
        known: dict[str, dict[str, Any]] = {}
        first = seq < snap.seq  # the page is older than the snapshot: send it everything
        if not first:  # the tiles the page already shows
            tiles = snap.derived("tiles", _tiles)
            known.update(tiles if rack is None else {rack: tiles[rack]})
        yield f"retry: {RETRY_MS}\n\n"
        start = last = changed = time.monotonic()
        while (now := time.monotonic()) - start < max_s and now - changed < config.stream_idle_s:
            if await request.is_disconnected():
                return
            snap = cache.peek() or snap
            if snap.seq > seq:
                body = await run_in_threadpool(change, store, snap, seq, rack, known, first)
                first = False
                seq = snap.seq
                yield _message(body)
                last = changed = time.monotonic()
            elif time.monotonic() - last >= KEEPALIVE_S:
                yield ": keepalive\n\n"
                last = time.monotonic()
            await asyncio.sleep(interval)

    return StreamingResponse(messages(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
                             background=BackgroundTask(release))
