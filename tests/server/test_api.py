"""The /api/v1 contract against a real `rackscale serve` over a demo-seeded store."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from rackscale.report import report_document
from rackscale.store import Store

from .conftest import DRAIN_API, TOKEN, Server


def _is_error(status: int, body: Any, expect: int) -> None:
    assert status == expect, body
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"status", "kind", "message"}, body
    assert body["error"]["status"] == expect and body["error"]["message"]


def _state(srv: Server, rack: str) -> str:
    return srv.get(f"/api/v1/racks/{rack}")[1]["state"]


def test_summary_matches_the_report_ledger(server: Server) -> None:
    status, s = server.get("/api/v1/summary")
    assert status == 200
    _doc, ledger = report_document(Store(f"sqlite:///{server.db}", readonly=True))
    assert s["fleet"] == "seed-504" and s["gpus"] == 504 and s["racks"] == 7
    assert sum(r["gpus"] for r in s["gpus_by"]) == 504
    assert sum(s["gpus_by_state"].values()) == 504
    assert s["usable"]["gpus"] == ledger.steps[-1].count
    assert s["findings"] == len(ledger.findings) > 0
    status, led = server.get("/api/v1/ledger")
    assert [st["count"] for st in led["steps"]] == [st.count for st in ledger.steps]


def test_racks_paging_covers_every_rack_once(server: Server) -> None:
    _, full = server.get("/api/v1/racks?limit=500")
    assert full["total"] == 7 and len(full["items"]) == 7
    pages = [server.get(f"/api/v1/racks?offset={o}&limit=3")[1] for o in (0, 3, 6)]
    ids = [r["id"] for p in pages for r in p["items"]]
    assert ids == [r["id"] for r in full["items"]] and len(set(ids)) == 7
    assert [len(p["items"]) for p in pages] == [3, 3, 1]
    _, west = server.get("/api/v1/racks?region=us-west")
    assert west["total"] == 3 and all(r["region"] == "us-west" for r in west["items"])


def test_findings_filters(server: Server) -> None:
    _, all_f = server.get("/api/v1/findings?limit=500")
    assert all_f["total"] > 0
    kind = all_f["items"][0]["kind"]
    _, by_kind = server.get(f"/api/v1/findings?kind={kind}")
    assert by_kind["total"] == sum(1 for f in all_f["items"] if f["kind"] == kind) > 0
    assert all(f["kind"] == kind for f in by_kind["items"])
    rack = "/".join(all_f["items"][0]["component"].split("/")[:2])
    _, by_rack = server.get(f"/api/v1/findings?rack={rack}")
    assert by_rack["total"] > 0
    assert all(f["component"].startswith(rack) for f in by_rack["items"])
    stage = all_f["items"][0]["stage"]
    _, by_stage = server.get(f"/api/v1/findings?stage={stage}")
    assert all(f["stage"] == stage for f in by_stage["items"]) and by_stage["total"] > 0
    _, none = server.get("/api/v1/findings?kind=no_such_kind")
    assert none["total"] == 0 and none["items"] == []


def test_rack_component_and_runs(server: Server) -> None:
    status, rack = server.get("/api/v1/racks/us-west/r03")
    assert status == 200 and len(rack["trays"]) == 18
    assert rack["history"] and rack["history"][0]["kind"] == "lifecycle.transition"
    status, comp = server.get("/api/v1/components/us-east/r01/c01?limit=2")
    assert status == 200 and comp["kind"] == "compute_tray"
    assert comp["history"]["total"] > 2 and len(comp["history"]["items"]) == 2
    _, runs = server.get("/api/v1/certify/runs")
    assert runs["total"] == 1 and runs["items"][0]["kind"] == "certify.run"


@pytest.mark.parametrize("path,code", [
    ("/api/v1/racks/us-east/r99", 404),
    ("/api/v1/components/us-east/r01/c99/gpu0", 404),
    ("/api/v1/nope", 404),
    ("/api/v1/racks?limit=0", 422),
    ("/api/v1/racks?offset=-1", 422),
    ("/api/v1/racks?limit=abc", 422),
    ("/api/v1/components/us-east//r01", 400),
    ("/api/v1/components/us-east/r01/%2e%2e/%2e%2e/etc", 400),
    ("/racks/..%2f..%2fetc", 400),
])
def test_errors_share_one_shape(server: Server, path: str, code: int) -> None:
    _is_error(*server.get(path), code)


def test_openapi_is_published_and_versioned(server: Server) -> None:
    status, schema = server.get("/api/v1/openapi.json")
    assert status == 200 and schema["openapi"].startswith("3.")
    paths = set(schema["paths"])
    assert {"/api/v1/summary", "/api/v1/racks", "/api/v1/findings", "/api/v1/ledger",
            "/api/v1/racks/{rack_id}/drain", "/api/v1/certify/runs"} <= paths
    assert all(p.startswith("/api/v1/") for p in paths)


def _raw(srv: Server, head: bytes) -> bytes:
    host, port = srv.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        return s.recv(65536)


@pytest.mark.parametrize("case", ["no token", "wrong token", "not bearer", "oversized",
                                  "chunked oversized", "traversal", "bad json", "extra field",
                                  "NUL in reason", "ESC in reason"])
def test_refused_mutations_change_nothing(server: Server, case: str) -> None:
    seq0 = server.get("/api/v1/health")[1]["seq"]
    before = _state(server, DRAIN_API)
    url = f"/api/v1/racks/{DRAIN_API}/drain"
    body = {"reason": "test"}
    if case == "no token":
        _is_error(*server.post(url, body), 401)
    elif case == "wrong token":
        _is_error(*server.post(url, body, token=TOKEN[:-1] + "X"), 401)
    elif case == "not bearer":
        _is_error(*server.post(url, body, headers={"Authorization": f"Basic {TOKEN}"}), 401)
    elif case == "oversized":
        _is_error(*server.post(url, {"reason": "x" * 100_000}, token=TOKEN), 413)
    elif case == "chunked oversized":
        chunk = b"x" * 40_000
        head = (f"POST {url} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n").encode()
        resp = _raw(server, head + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n")
        assert resp.startswith(b"HTTP/1.1 413"), resp[:200]
    elif case == "traversal":
        _is_error(*server.post("/api/v1/racks/us-east/r01/%2e%2e/r02/drain", body,
                               token=TOKEN), 400)
    elif case == "bad json":
        _is_error(*server.post(url, b"{not json", token=TOKEN), 422)
    elif case == "extra field":
        _is_error(*server.post(url, {"reason": "x", "to": "production"}, token=TOKEN), 422)
    elif case == "NUL in reason":  # PostgreSQL refuses a NUL: it was a 500 there
        _is_error(*server.post(url, {"reason": "cable\x00swap"}, token=TOKEN), 422)
    elif case == "ESC in reason":  # would reach the terminal of `lifecycle history`
        _is_error(*server.post(url, {"reason": "x\x1b]0;pwned\x07"}, token=TOKEN), 422)
    assert server.get("/api/v1/health")[1]["seq"] == seq0
    assert _state(server, DRAIN_API) == before


def test_illegal_drain_is_a_conflict(server: Server) -> None:
    _, racks = server.get("/api/v1/racks?state=maintenance")
    rack = racks["items"][0]["id"]
    _is_error(*server.post(f"/api/v1/racks/{rack}/drain", {"reason": "x"}, token=TOKEN), 409)
    assert _state(server, rack) == "maintenance"


def test_drain_with_token_moves_the_rack_and_records_why(server: Server) -> None:
    assert _state(server, DRAIN_API) == "degraded"
    status, out = server.post(f"/api/v1/racks/{DRAIN_API}/drain",
                              {"reason": "swap leaf optics"}, token=TOKEN)
    assert status == 200 and out["from"] == "degraded" and out["to"] == "draining"
    rack = server.get(f"/api/v1/racks/{DRAIN_API}")[1]
    assert rack["state"] == "draining"
    last = rack["history"][-1]
    assert last["reason"] == "swap leaf optics" and last["actor"] == "server"
    _is_error(*server.post(f"/api/v1/racks/{DRAIN_API}/drain", {"reason": "again"},
                           token=TOKEN), 409)
    log = server.log.read_text()
    assert TOKEN not in log and "Bearer" not in log
