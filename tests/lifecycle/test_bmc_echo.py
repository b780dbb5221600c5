"""A BMC's error body that echoes the credentials in an encoded form (the Authorization header
percent-encoded, the password percent-encoded or in base64, the decoded pair JSON-escaped)
shows none of them in the driver's message. A real HTTP server on a real socket answers."""

from __future__ import annotations

import base64
import json
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rackscale.lifecycle import RedfishPowerDriver
from rackscale.lifecycle.drivers import DriverError
from rackscale.lifecycle.redfish import BmcCredentials

USER, PASSWORD = "bmcops", "Pa/55 w@rd9"
PAIR = f"{USER}:{PASSWORD}"
TOKEN = base64.b64encode(PAIR.encode()).decode()
# Every form of the secret a reader could decode back to it.
FORMS = [PASSWORD, PAIR, TOKEN, urllib.parse.quote(PASSWORD, safe=""),
         urllib.parse.quote_plus(PASSWORD), base64.b64encode(PASSWORD.encode()).decode(),
         urllib.parse.quote(TOKEN, safe="")]

ECHOES: dict[str, Callable[[str], str]] = {
    "header percent-encoded": lambda auth: "request=" + urllib.parse.quote(
        f"Authorization: {auth}", safe=""),
    "password percent-encoded": lambda _a: json.dumps(
        {"user": USER, "password_seen": urllib.parse.quote(PASSWORD, safe="")}),
    "password plus-encoded, lower-case hex": lambda _a: "form: user=bmcops&pw=" + re.sub(
        "%[0-9A-F]{2}", lambda m: m.group(0).lower(), urllib.parse.quote_plus(PASSWORD)),
    "password in base64": lambda _a: json.dumps(
        {"echo": base64.b64encode(f"login failed for {PASSWORD}".encode()).decode()}),
    "pair JSON-escaped": lambda _a: json.dumps({"credentials": PAIR}).replace("/", "\\/")
        .replace("@", "\\u0040"),
    "token url-safe base64 without padding": lambda _a: "seen " + base64.urlsafe_b64encode(
        PAIR.encode()).decode().rstrip("="),
}


def _handler(echo: Callable[[str], str]) -> type[BaseHTTPRequestHandler]:
    class Echo(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = echo(self.headers.get("Authorization", "")).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass
    return Echo


@pytest.fixture(params=sorted(ECHOES))
def echo_bmc(request: pytest.FixtureRequest) -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(ECHOES[request.param]))
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()
    thread.join(timeout=10)


def test_an_encoded_echo_of_the_credentials_is_masked(echo_bmc: str) -> None:
    driver = RedfishPowerDriver(echo_bmc, credentials=BmcCredentials(USER, PASSWORD))
    with pytest.raises(DriverError, match="HTTP 500") as err:
        driver.systems()
    msg = str(err.value)
    assert "***" in msg
    for form in FORMS:
        assert form not in msg, (form, msg)
    assert urllib.parse.unquote_plus(PASSWORD) not in urllib.parse.unquote_plus(msg)
