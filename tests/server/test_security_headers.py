"""Every answer of a real `rackscale serve` carries the security headers: no framing, no
sniffing, and a Content-Security-Policy; a page's policy lets only its own (nonced) scripts
run, a fresh nonce per answer."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from .conftest import Server

PATHS = ["/", "/racks/us-west/r03", "/api/v1/summary", "/api/v1/racks?limit=2", "/metrics",
         "/api/v1/openapi.json", "/api/v1/nothing-here", "/racks/us-west/r99",
         "/api/v1/stream?max_s=0.2"]


def _headers(url: str) -> tuple[int, dict[str, str], str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, \
                resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, {k.lower(): v for k, v in err.headers.items()}, err.read().decode()


@pytest.mark.parametrize("path", PATHS)
def test_every_answer_has_the_security_headers(server: Server, path: str) -> None:
    for _ in range(2):  # the second GET of a read may come from the hot-read cache
        _, h, _body = _headers(server.url + path)
        assert h.get("x-frame-options") == "DENY", (path, h)
        assert h.get("x-content-type-options") == "nosniff", (path, h)
        csp = h.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, (path, csp)
        assert "unsafe-inline" not in csp.split("script-src", 1)[-1].split(";")[0]


def test_a_pages_scripts_run_by_a_fresh_nonce(server: Server) -> None:
    nonces = []
    for _ in range(2):
        status, h, body = _headers(server.url + "/racks/us-west/r03")
        assert status == 200
        (nonce,) = re.findall(r"script-src 'nonce-([^']+)'", h["content-security-policy"])
        scripts = re.findall(r"<script([^>]*)>", body)
        assert scripts and all(f'nonce="{nonce}"' in s for s in scripts), scripts
        nonces.append(nonce)
    assert nonces[0] != nonces[1]
