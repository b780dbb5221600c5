"""The dashboard in real headless Chromium (Debian chromium driven by Playwright): the rack
map, a rack page and a drain; what the tiles, legend, ledger and findings look like (colour by
state with the state's name, readable evidence, basis colours as the report's); axe-core on
both pages; live updates pushed over server-sent events."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rackscale.report.palette import BASIS_STYLE, STATE_STYLE
from rackscale.store import NewEvent, Store

from .conftest import DRAIN_BROWSER, TOKEN, Server, copy_db, start_server, stop_server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
AXE = Path(__file__).parent.parent / "report" / "vendor" / "axe.min.js"

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                reason=f"{CHROMIUM} missing (scripts/bootstrap.sh test)")


def _css_rgb(hex_color: str) -> str:
    h = hex_color.lstrip("#")
    h = "".join(c * 2 for c in h) if len(h) == 3 else h
    return "rgb({}, {}, {})".format(*(int(h[i:i + 2], 16) for i in (0, 2, 4)))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


def _axe(page: Any) -> list[Any]:
    # The page runs only scripts with its nonce (Content-Security-Policy): axe gets it too.
    page.evaluate("src => { const s = document.createElement('script'); "
                  "s.nonce = document.querySelector('script[nonce]').nonce; "
                  "s.textContent = src; document.head.append(s); }", AXE.read_text())
    result = page.evaluate("async () => { const r = await axe.run(document); "
                           "return {passes: r.passes.length, violations: r.violations"
                           ".map(v => [v.id, v.impact, v.nodes.length, "
                           "v.nodes.slice(0, 3).map(n => n.target.join(' '))])}; }")
    assert result["passes"] > 10  # axe ran its rules
    return [v for v in result["violations"] if v[1] in ("serious", "critical")]


def test_map_rack_page_and_live_drain(server: Server, browser: Any) -> None:
    from playwright.sync_api import expect

    _, racks = server.get("/api/v1/racks?limit=500")
    ctx = browser.new_context()
    try:
        # Nothing may load from outside the server (offline dashboard, no CDN).
        outside: list[str] = []
        ctx.on("request", lambda r: None if r.url.startswith(server.url)
               else outside.append(r.url))
        board = ctx.new_page()
        board.goto(server.url + "/")
        expect(board.locator("#live-status")).to_contain_text("connected", timeout=30_000)
        tiles = board.locator("#rackmap [data-rack]")
        assert tiles.count() == racks["total"] == 7
        for r in racks["items"]:
            tile = board.locator(f'#rackmap [data-rack="{r["id"]}"]')
            assert tile.get_attribute("data-state") == r["state"]
            assert int(tile.get_attribute("data-findings") or 0) == r["findings"]
            assert tile.locator(".st").inner_text() == r["state"]  # the state in words
        assert board.locator("#waterfall tbody tr").count() > 3
        assert board.locator("#findings tbody tr").count() > 0

        page = ctx.new_page()
        board.locator(f'#rackmap [data-rack="{DRAIN_BROWSER}"]').click()
        board.wait_for_url(f"**/racks/{DRAIN_BROWSER}")
        page.goto(server.url + f"/racks/{DRAIN_BROWSER}")
        assert page.locator("#trays tr[data-tray]").count() == 18
        assert page.locator("#timeline li").count() > 5  # the rack's own transitions
        assert page.locator("#tray-timeline li").count() >= 18 * 4
        assert page.locator("#conditions tr[data-condition]").count() >= 1
        board.go_back()
        tile = board.locator(f'#rackmap [data-rack="{DRAIN_BROWSER}"]')
        assert tile.get_attribute("data-state") == "degraded"
        expect(board.locator("#live-status")).to_contain_text("connected", timeout=30_000)
        expect(page.locator("#live-status")).to_contain_text("connected", timeout=30_000)
        before = page.locator("#timeline li").count()

        page.fill("#drain input[name=reason]", "browser drain")
        page.click("#drain button")
        expect(page.locator("#drain-result")).to_contain_text("refused", timeout=30_000)
        assert server.get(f"/api/v1/racks/{DRAIN_BROWSER}")[1]["state"] == "degraded"

        page.fill("#drain input[name=token]", TOKEN)
        page.click("#drain button")
        expect(page.locator("#drain-result")).to_contain_text("draining", timeout=30_000)
        assert server.get(f"/api/v1/racks/{DRAIN_BROWSER}")[1]["state"] == "draining"
        # The open map (not reloaded) gets the change pushed: colour and label of draining.
        expect(tile).to_have_attribute("data-state", "draining", timeout=30_000)
        expect(tile.locator(".st")).to_have_text("draining")
        assert tile.evaluate("t => getComputedStyle(t).backgroundColor") == \
            _css_rgb(STATE_STYLE["draining"][0])
        # ... and the rack page its timeline entry, with the reason given.
        expect(page.locator("#timeline li")).to_have_count(before + 1, timeout=30_000)
        assert "browser drain" in page.locator("#timeline li").last.inner_text()
        expect(page.locator("#rack-state")).to_have_text("draining")
        assert outside == []
    finally:
        ctx.close()


def test_tiles_legend_ledger_and_evidence_read_right(server: Server, browser: Any) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    try:
        page.goto(server.url + "/")
        # Tiles take their state's colour (the report's palette), with its name on them.
        colours: dict[str, str] = {}
        for tile in page.locator("#rackmap a.rack").all():
            state = tile.get_attribute("data-state") or ""
            bg = tile.evaluate("t => getComputedStyle(t).backgroundColor")
            assert bg == _css_rgb(STATE_STYLE[state][0]), state
            assert tile.locator(".st").inner_text() == state
            colours[state] = bg
        assert {"degraded", "maintenance", "production"} <= set(colours)
        assert len(set(colours.values())) == len(colours)  # tile colour differs by state
        # The legend: one chip per state in use, none overlapping another.
        boxes = [b for b in (li.bounding_box() for li in page.locator("#legend li").all()) if b]
        assert len(boxes) >= 3
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                apart = (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                         or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])
                assert apart, (a, b)
        # Usable capacity: each bar in its basis colour with the basis named; losses by reason.
        for row in page.locator("#waterfall tbody tr").all():
            basis = row.get_attribute("data-basis") or ""
            fill = row.locator(".fill").evaluate("f => getComputedStyle(f).backgroundColor")
            assert fill == _css_rgb(BASIS_STYLE[basis][0]), basis
        powered = page.locator('#waterfall tr[data-step="powered"]')
        assert "recorded events" in powered.inner_text()
        assert "144" in powered.locator('li[data-reason="rack_state:maintenance"]').inner_text()
        assert powered.locator(".loss").count() == 1
        # Evidence as text: measured, expected, unit, basis, confidence; no dict repr.
        slow = page.locator('#findings tr[data-component="us-east/r02/c07/gpu3"]')
        assert slow.locator(".measured").inner_text().startswith("2,819 TFLOPS")
        assert "3,197 TFLOPS" in slow.locator(".expected").inner_text()
        assert slow.locator(".unit").inner_text() == "TFLOPS"
        assert "simulated (twin)" in slow.inner_text()
        assert slow.locator(".confidence").inner_text() == "99%"
        table = page.locator("#findings").inner_text()
        assert "{'" not in table and "&#" not in table and "'simulated'" not in table
        bad = _axe(page)
        assert not bad, bad

        page.goto(server.url + "/racks/us-east/r03")
        # Tray states are labelled badges with AA contrast (4.5:1) on their colour.
        ratios = page.locator("#trays .badge").evaluate_all("""bs => bs.map(b => {
            const rgb = s => s.match(/\\d+/g).slice(0, 3).map(Number);
            const lum = c => { const [r, g, bl] = c.map(v => { v /= 255;
                return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
                return 0.2126 * r + 0.7152 * g + 0.0722 * bl; };
            const st = getComputedStyle(b);
            const [a, c] = [lum(rgb(st.color)), lum(rgb(st.backgroundColor))];
            return (Math.max(a, c) + 0.05) / (Math.min(a, c) + 0.05); })""")
        assert len(ratios) == 18 and min(ratios) >= 4.5, ratios
        bad = _axe(page)
        assert not bad, bad
    finally:
        page.close()


@pytest.fixture
def own_server(demo_db: Path, tmp_path: Path) -> Iterator[Server]:
    """A server of its own: the live test writes events no other test expects."""
    srv = start_server(copy_db(demo_db, tmp_path / "rackscale.db"), tmp_path)
    yield srv
    stop_server(srv)


@pytest.mark.timeout(120)
def test_new_finding_and_transition_appear_live(own_server: Server, browser: Any) -> None:
    """Events appended to the store by another process (as a controller or a certification
    run would) show up on open pages without a reload, escaped."""
    from playwright.sync_api import expect

    srv = own_server
    ctx = browser.new_context()
    try:
        board, rack = ctx.new_page(), ctx.new_page()
        board.goto(srv.url + "/")
        rack.goto(srv.url + "/racks/us-west/r02")
        for p in (board, rack):
            expect(p.locator("#live-status")).to_contain_text("connected", timeout=30_000)
            p.evaluate("() => { window.__notReloaded = true; }")
        store = Store(f"sqlite:///{srv.db}")
        try:
            base = store.events(kind="certify.finding", limit=1)[0].payload
            reason = "<img src=x onerror=window.__pwned=1> leak check"
            store.append_events([
                NewEvent(component_id="us-west/r02", kind="lifecycle.transition",
                         payload={"from": "production", "to": "draining"},
                         actor="controller", reason=reason),
                NewEvent(component_id="us-west/r02/c05/gpu1", kind="certify.finding",
                         payload=base | {"component": "us-west/r02/c05/gpu1",
                                         "kind": "slow_gpu", "stage": 1, "confidence": 0.95,
                                         "evidence": {"simulated": True, "value": 2500.5,
                                                      "unit": "TFLOPS", "reference": 3196.95,
                                                      "rel": 0.782, "fail_below_rel": 0.9689,
                                                      "repeats": 8, "repeats_failed_hard": 8,
                                                      "baseline": "fleet median/MAD"}}),
            ])
            seqs = [e.seq for e in store.events(newest_first=True, limit=2)]
        finally:
            store.close()
        tile = board.locator('#rackmap [data-rack="us-west/r02"]')
        expect(tile).to_have_attribute("data-state", "draining", timeout=30_000)
        expect(tile.locator(".st")).to_have_text("draining")
        item = board.locator(f'#live-events li[data-seq="{seqs[1]}"]')
        expect(item).to_contain_text("<img src=x", timeout=30_000)  # as text, not markup
        new = board.locator(f'#findings tr[data-seq="{seqs[0]}"]')
        expect(new).to_be_visible(timeout=30_000)
        assert new.locator(".measured").inner_text().startswith("2,500 TFLOPS")
        assert "fleet median/MAD" in new.locator(".expected").inner_text()
        assert new.locator(".confidence").inner_text() == "95%"
        expect(board.locator("#findings-count")).to_have_text("8")
        # The rack page: its tile, its timeline and its findings, live too.
        expect(rack.locator("#rack-state")).to_have_text("draining", timeout=30_000)
        expect(rack.locator(f'#timeline li[data-seq="{seqs[1]}"]')).to_contain_text("draining")
        expect(rack.locator(f'#findings tr[data-seq="{seqs[0]}"]')).to_be_visible()
        for p in (board, rack):
            assert p.evaluate("() => window.__notReloaded === true")
            assert p.evaluate("() => window.__pwned === undefined")
            assert int(p.locator("#seq").inner_text()) == seqs[0]
    finally:
        ctx.close()


@pytest.mark.timeout(120)
def test_the_dashboard_reconnects_after_its_stream_was_refused(
        demo_db: Path, tmp_path: Path, browser: Any) -> None:
    """A page whose stream is refused (this client holds its share of streams: 429) says it
    retries, and connects once a slot is free; the browser alone would give up for good."""
    import http.client

    from playwright.sync_api import expect

    srv = start_server(copy_db(demo_db, tmp_path / "rackscale.db"), tmp_path,
                       extra=["--max-streams-per-client", "1"])
    conn = http.client.HTTPConnection("127.0.0.1", int(srv.url.rsplit(":", 1)[1]), timeout=30)
    ctx = browser.new_context()
    try:
        conn.request("GET", "/api/v1/stream")  # holds the one slot of 127.0.0.1
        assert conn.getresponse().status == 200
        page = ctx.new_page()
        page.goto(srv.url + "/")
        expect(page.locator("#live-status")).to_contain_text("retrying in", timeout=30_000)
        conn.close()
        expect(page.locator("#live-status")).to_contain_text("connected", timeout=60_000)
    finally:
        ctx.close()
        conn.close()
        stop_server(srv)
