"""Live streams are bounded, on a real `rackscale serve` over real sockets: one client address
holds at most --max-streams-per-client (429 past it), the server at most --max-streams (503),
each refusal with Retry-After; a closed stream frees its slot; a stream with nothing to send
ends after --stream-idle-s."""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Server, copy_db, start_server, stop_server

PATH = "/api/v1/stream"


@pytest.fixture(scope="module")
def capped(demo_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("stream-caps")
    srv = start_server(copy_db(demo_db, tmp / "rackscale.db"), tmp,
                       extra=["--max-streams", "3", "--max-streams-per-client", "2",
                              "--stream-idle-s", "2"])
    yield srv
    stop_server(srv)


def _open(srv: Server, source: str, query: str = "") -> tuple[http.client.HTTPConnection,
                                                               http.client.HTTPResponse]:
    """A stream from the client address `source` (another loopback address is another
    client), its first line read when it was accepted."""
    port = int(srv.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                      source_address=(source, 0))
    conn.request("GET", PATH + query)
    resp = conn.getresponse()
    if resp.status == 200:
        assert resp.readline().startswith(b"retry: ")
    return conn, resp


def _refused(srv: Server, source: str) -> tuple[int, str | None, bytes]:
    conn, resp = _open(srv, source)
    try:
        return resp.status, resp.getheader("Retry-After"), resp.read()
    finally:
        conn.close()


def test_streams_are_capped_per_client_and_in_all(capped: Server) -> None:
    held = [_open(capped, "127.0.0.1"), _open(capped, "127.0.0.1")]
    try:
        assert all(r.status == 200 for _, r in held)
        status, retry, body = _refused(capped, "127.0.0.1")
        assert (status, retry) == (429, "5") and b"live streams" in body
        held.append(_open(capped, "127.0.0.2"))  # another client: the third and last slot
        assert held[-1][1].status == 200
        status, retry, body = _refused(capped, "127.0.0.3")
        assert (status, retry) == (503, "5") and b"live streams" in body
        assert capped.get("/api/v1/summary")[0] == 200  # the rest of the API still answers
        held.pop(0)[0].close()
        deadline = time.monotonic() + 15  # the server sees the close on its next poll
        while True:
            conn, resp = _open(capped, "127.0.0.1")
            if resp.status == 200:
                held.append((conn, resp))
                break
            conn.close()
            assert time.monotonic() < deadline, "a closed stream's slot was not freed"
            time.sleep(0.3)
    finally:
        for conn, _ in held:
            conn.close()


def test_a_stream_with_nothing_to_send_ends_when_idle(capped: Server) -> None:
    _, summary = capped.get("/api/v1/summary")
    deadline = time.monotonic() + 20
    while True:  # the previous test's streams may take a poll to be let go
        conn, resp = _open(capped, "127.0.0.4", f"?after={summary['seq']}")
        if resp.status == 200:
            break
        conn.close()
        assert time.monotonic() < deadline
        time.sleep(0.3)
    try:
        t0 = time.monotonic()
        rest = resp.read()  # returns when the server ends the stream
        assert time.monotonic() - t0 < 10, "an idle stream was held past --stream-idle-s"
        assert b"event: change" not in rest
    finally:
        conn.close()


@pytest.mark.parametrize(("field", "value"), [
    ("max_streams", 0), ("max_streams", 100_001), ("max_streams_per_client", 0),
    ("max_streams_per_client", 257), ("stream_idle_s", 0.5), ("stream_idle_s", 3601.0),
    ("stream_idle_s", float("nan")), ("stream_idle_s", float("inf")), ("stream_idle_s", 1e300),
])
def test_every_stream_bound_is_itself_bounded(field: str, value: float) -> None:
    from rackscale.server import ServerConfig, ServerConfigError

    with pytest.raises(ServerConfigError, match=field.replace("_", "-")):
        ServerConfig(**{field: value})  # type: ignore[arg-type]  # ints and floats by field
