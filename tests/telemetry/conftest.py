from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class Exporter:
    """A real HTTP server on loopback serving pages by path, as dcgm-exporter serves
    /metrics; a test changes `pages` between scrapes."""

    url: str
    pages: dict[str, str] = field(default_factory=dict)
    hits: int = 0


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    ex = Exporter(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the stdlib names the handler so
            ex.hits += 1
            body = ex.pages.get(self.path.split("?", 1)[0])
            if body is None:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:  # quiet: the test reads what it needs
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ex.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ex
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
