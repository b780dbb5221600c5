"""The FastAPI application: API, dashboard pages and /metrics over one store."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rackscale import __version__
from rackscale.fleet import Topology
from rackscale.lifecycle import coolant_responses
from rackscale.server import errors, jobs, ops, pages, stream
from rackscale.server.api import raw_target, router, warm
from rackscale.server.config import ServerConfig, ServerConfigError
from rackscale.server.errors import error_response
from rackscale.server.headers import SecurityHeaders
from rackscale.server.metrics import CONTENT_TYPE, Metrics
from rackscale.server.snapshot import SnapshotCache
from rackscale.store import Store, loaded_spec
from rackscale.telemetry import Watch


class BodyLimit:
    """Refuse request bodies over `limit` bytes: by Content-Length before reading, and by
    counting while reading (a chunked body has no length to check)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    size = int(value)
                except ValueError:
                    size = -1
                if size < 0 or size > self.limit:
                    await self._refuse(scope, receive, send)
                    return
        # Read the whole (small) body here, so a chunked body over the limit is refused
        # before the app sees a byte of it; the app then reads it back from the buffer.
        chunks: list[bytes] = []
        seen = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            chunks.append(msg.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not msg.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        resp = error_response(413, f"request body over {self.limit} bytes (or a bad "
                              "Content-Length); nothing was read or changed")
        await resp(scope, receive, send)


class HotReads:
    """Answer a GET whose exact target (path and query) a route already answered 200 for the
    current snapshot straight from that body, before routing and parameter parsing: polling
    dashboards and scripts repeat the same few requests, and at 100 requests/s the framework's
    per-request work was most of the server's CPU. Anything else (another snapshot, other
    parameters, a request with a body) goes through the app as usual."""

    def __init__(self, app: ASGIApp, cache: SnapshotCache) -> None:
        self.app, self.cache = app, cache

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            snap = self.cache.peek()
            body = None if snap is None else snap.answered.get(raw_target(scope))
            if body is not None and not any(n in (b"content-length", b"transfer-encoding")
                                            for n, _v in scope.get("headers", [])):
                await send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-length", str(len(body)).encode()),
                    (b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _telemetry_watch(config: ServerConfig, store: Store) -> Watch | None:
    """The server's telemetry watch (`serve --dcgm`), made once at start: the fleet's
    topology and the lifecycle's coolant answers, as `telemetry watch` uses them."""
    if not config.dcgm:
        return None
    spec = loaded_spec(store)
    if spec is None:
        raise ServerConfigError(f"--dcgm needs a fleet in {store.safe_url}: run `rackscale "
                                "fleet load` first")
    return Watch(store=store, topo=Topology.build(spec), sources=config.dcgm,
                 every_s=config.dcgm_every_s, hosts_file=config.dcgm_hosts,
                 cooling=functools.partial(coolant_responses, store))


def create_app(config: ServerConfig, store: Store | None = None) -> FastAPI:
    store = store or Store(config.db)
    cache = SnapshotCache(store, warm=warm)
    watch = _telemetry_watch(config, store)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The watch's thread lives as long as the server: started with it, stopped (and
        # joined) when it shuts down, by Ctrl-C or SIGTERM alike.
        if watch is not None:
            watch.start()
        try:
            yield
        finally:
            if watch is not None:
                watch.stop()

    app = FastAPI(title="rackscale", version=__version__, openapi_url="/api/v1/openapi.json",
                  lifespan=lifespan,
                  docs_url=None, redoc_url=None,  # their pages load scripts from a CDN
                  description="Fleet state, certification findings and the usable-capacity "
                  "ledger of one rackscale store. Mutations need the bearer token.")
    app.state.config, app.state.store, app.state.cache = config, store, cache
    app.state.telemetry = watch
    app.state.checkpoints = ops.CheckpointSource(config.checkpoints)
    app.state.jobs = jobs.CertifyJobs(store)
    app.state.streams = stream.StreamSlots(config.max_streams, config.max_streams_per_client)
    metrics_source = Metrics(cache, app.state.checkpoints)
    errors.install(app)
    app.include_router(router)
    app.include_router(ops.router)
    app.include_router(jobs.router)
    app.include_router(stream.router)
    app.include_router(pages.router)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.add_middleware(HotReads, cache=cache)  # the outermost but one, before the rest
    app.add_middleware(SecurityHeaders)  # outermost: on every answer, a hot read's included

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(metrics_source.render(), media_type=CONTENT_TYPE)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    @app.get("/api", include_in_schema=False)
    def api_root() -> dict[str, Any]:
        return {"versions": ["v1"], "openapi": "/api/v1/openapi.json"}

    return app
