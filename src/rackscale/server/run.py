"""Run the app on uvicorn (the `rackscale serve` command's engine)."""

from __future__ import annotations

import sys

from rackscale.redact import redact_logs, url_secrets
from rackscale.server.config import ServerConfig
from rackscale.store import Store

# The loggers a running server writes to: its own and uvicorn's.
SERVER_LOGGERS = ("rackscale", "uvicorn", "uvicorn.error", "uvicorn.access")


def serve(config: ServerConfig) -> None:
    import uvicorn

    from rackscale.server.app import create_app

    store = Store(config.db)  # opened first: a bad --db is an error before anything binds
    app = create_app(config, store)
    # Access logs name method and path only; the Authorization header is never logged.
    config_ = uvicorn.Config(app, host=config.host, port=config.port, log_level="warning",
                             access_log=False, server_header=False,
                             # open dashboards hold live streams: a stop closes them after
                             # this long, not never
                             timeout_graceful_shutdown=3)
    server = uvicorn.Server(config_)
    # uvicorn.Config has just set up its loggers; from here every log line, tracebacks of
    # unhandled errors included, is redacted (the token and the store's password by value).
    redact_logs(SERVER_LOGGERS, secrets=[config.token, *url_secrets(store.url)])
    # Bound here, before the start line, so the line names the port the kernel gave
    # (`--port 0` picks a free one) and a script can read it.
    sock = config_.bind_socket()
    sock.listen(config_.backlog)  # a client that reads the line at once is queued, not refused
    port = sock.getsockname()[1]
    mode = "mutations need the token" if config.token else "read-only (no token configured)"
    print(f"rackscale serve: http://{_host(config.host)}:{port}/ ({mode}; store "
          f"{store.safe_url})", file=sys.stderr, flush=True)
    server.run(sockets=[sock])


def _host(host: str) -> str:
    """`host` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
