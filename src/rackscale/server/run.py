"""Run the app on uvicorn (the `rackscale serve` command's engine)."""

from __future__ import annotations

import sys

from rackscale.server.config import ServerConfig
from rackscale.store import Store


def serve(config: ServerConfig) -> None:
    import uvicorn

    from rackscale.server.app import create_app

    store = Store(config.db)  # opened first: a bad --db is an error before anything binds
    app = create_app(config, store)
    # Access logs name method and path only; the Authorization header is never logged.
    server = uvicorn.Server(uvicorn.Config(app, host=config.host, port=config.port,
                                           log_level="warning", access_log=False,
                                           server_header=False))
    mode = "mutations need the token" if config.token else "read-only (no token configured)"
    print(f"rackscale serve: http://{config.host}:{config.port}/ ({mode}; store "
          f"{store.safe_url})", file=sys.stderr, flush=True)
    server.run()
