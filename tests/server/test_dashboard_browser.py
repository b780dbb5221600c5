"""The dashboard in real headless Chromium (Debian chromium driven by Playwright)."""

from __future__ import annotations

import shutil

import pytest

from .conftest import DRAIN_BROWSER, TOKEN, Server

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                reason=f"{CHROMIUM} missing (scripts/bootstrap.sh test)")


def test_map_rack_page_and_live_drain(server: Server) -> None:
    from playwright.sync_api import expect, sync_playwright

    _, racks = server.get("/api/v1/racks?limit=500")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            ctx = browser.new_context()
            # Nothing may load from outside the server (offline dashboard, no CDN).
            outside: list[str] = []
            ctx.on("request", lambda r: None if r.url.startswith(server.url)
                   else outside.append(r.url))
            board = ctx.new_page()
            board.goto(server.url + "/")
            tiles = board.locator("#rackmap [data-rack]")
            assert tiles.count() == racks["total"] == 7
            for r in racks["items"]:
                tile = board.locator(f'#rackmap [data-rack="{r["id"]}"]')
                assert tile.get_attribute("data-state") == r["state"]
                assert int(tile.get_attribute("data-findings") or 0) == r["findings"]
            assert board.locator("#waterfall tr").count() > 3
            assert board.locator("#findings tr").count() > 1

            page = ctx.new_page()
            board.locator(f'#rackmap [data-rack="{DRAIN_BROWSER}"]').click()
            board.wait_for_url(f"**/racks/{DRAIN_BROWSER}")
            page.goto(server.url + f"/racks/{DRAIN_BROWSER}")
            assert page.locator("#trays tr[data-tray]").count() == 18
            assert page.locator("#history tr").count() > 5
            board.go_back()
            tile = board.locator(f'#rackmap [data-rack="{DRAIN_BROWSER}"]')
            assert tile.get_attribute("data-state") == "degraded"

            page.fill("#drain input[name=reason]", "browser drain")
            page.click("#drain button")
            expect(page.locator("#drain-result")).to_contain_text("refused", timeout=10_000)
            assert server.get(f"/api/v1/racks/{DRAIN_BROWSER}")[1]["state"] == "degraded"

            page.fill("#drain input[name=token]", TOKEN)
            page.click("#drain button")
            expect(page.locator("#drain-result")).to_contain_text("draining", timeout=10_000)
            assert server.get(f"/api/v1/racks/{DRAIN_BROWSER}")[1]["state"] == "draining"
            # The open map (not reloaded) picks the change up by polling.
            expect(tile).to_have_attribute("data-state", "draining", timeout=15_000)
            assert outside == []
        finally:
            browser.close()
