"""/api/v1/stream over plain HTTP: server-sent events a script can read too."""

from __future__ import annotations

import json
import time
import urllib.request

from .conftest import Server


def _read(url: str) -> tuple[str, str]:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.headers.get("content-type", ""), resp.read().decode()


def test_stream_sends_what_changed_since_after(server: Server) -> None:
    _, summary = server.get("/api/v1/summary")
    t0 = time.monotonic()
    ctype, text = _read(server.url + "/api/v1/stream?after=0&max_s=1")
    assert time.monotonic() - t0 < 20  # max_s ends it
    assert ctype.startswith("text/event-stream")
    assert text.startswith("retry: ")
    msgs = [m for m in text.split("\n\n") if m.startswith("id: ")]
    assert len(msgs) == 1
    head, _, data = msgs[0].partition("\ndata: ")
    assert head.splitlines() == [f"id: {summary['seq']}", "event: change"]
    body = json.loads(data)
    assert body["seq"] == summary["seq"] and len(body["racks"]) == summary["racks"]
    assert body["findings_total"] == summary["findings"] == len(body["findings"])
    finding = body["findings"][0]
    assert {"measured", "expected", "unit", "basis_label", "confidence"} <= set(finding)
    assert all(e["kind"] != "lifecycle.transition" or e["component"].count("/") == 1
               for e in body["events"])  # the fleet feed: rack moves, not tray moves


def test_stream_of_one_rack_and_nothing_new(server: Server) -> None:
    _, summary = server.get("/api/v1/summary")
    _, text = _read(server.url + f"/api/v1/stream?after={summary['seq']}&max_s=0.5")
    assert "event: change" not in text  # up to date: nothing to send
    _, text = _read(server.url + "/api/v1/stream?after=0&max_s=0.5&rack=us-west/r03")
    body = json.loads(text.split("\ndata: ", 1)[1].split("\n\n", 1)[0])
    assert list(body["racks"]) == ["us-west/r03"]
    assert all(e["component"].startswith("us-west/r03") for e in body["events"])
    assert server.get("/api/v1/stream?rack=us-west/r99")[0] == 404
    assert server.get("/api/v1/stream?rack=../etc")[0] == 400
