"""HTTP API (/api/v1, OpenAPI), live fleet dashboard and Prometheus /metrics over one store.

Needs the `server` extra (FastAPI, uvicorn, prometheus-client).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rackscale.server.config import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_STREAMS_PER_CLIENT,
    DEFAULT_STREAM_IDLE_S,
    TOKEN_ENV,
    ServerConfig,
    ServerConfigError,
    is_loopback,
    read_token,
)

__all__ = ["DEFAULT_MAX_STREAMS", "DEFAULT_MAX_STREAMS_PER_CLIENT", "DEFAULT_STREAM_IDLE_S",
           "TOKEN_ENV", "ServerConfig", "ServerConfigError", "create_app", "is_loopback",
           "read_token", "serve"]


if TYPE_CHECKING:
    from fastapi import FastAPI

    from rackscale.store import Store


def create_app(config: ServerConfig, store: Store | None = None) -> FastAPI:
    """The FastAPI app (imported lazily: the CLI must start without the server extra)."""
    from rackscale.server.app import create_app as _create

    return _create(config, store)


def serve(config: ServerConfig) -> None:
    from rackscale.server.run import serve as _serve

    _serve(config)
