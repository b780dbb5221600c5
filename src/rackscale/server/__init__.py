"""HTTP API (/api/v1, OpenAPI), live fleet dashboard and Prometheus /metrics over one store.

Needs the `server` extra (FastAPI, uvicorn, prometheus-client).
"""

from rackscale.server.config import (
    TOKEN_ENV,
    ServerConfig,
    ServerConfigError,
    is_loopback,
    read_token,
)

__all__ = ["TOKEN_ENV", "ServerConfig", "ServerConfigError", "create_app", "is_loopback",
           "read_token", "serve"]


def create_app(*args, **kwargs):  # type: ignore[no-untyped-def]
    """The FastAPI app (imported lazily: the CLI must start without the server extra)."""
    from rackscale.server.app import create_app as _create

    return _create(*args, **kwargs)


def serve(config: ServerConfig) -> None:
    from rackscale.server.run import serve as _serve

    _serve(config)
