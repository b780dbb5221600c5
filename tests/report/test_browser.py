"""report.html in a real headless Chromium (Debian chromium driven by Playwright)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import sync_playwright

from rackscale.fleet import Topology
from rackscale.report import build_report
from rackscale.store import Store

from .events import SEED_FAULTS, certify, onboard, simulate

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _rgb(hex_color: str) -> tuple[int, int, int]:
    h = hex_color.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def _share(img: Image.Image, color: tuple[int, int, int], tol: int = 6) -> float:
    """Fraction of the image's pixels within `tol` of `color` on every channel."""
    px = np.asarray(img.convert("RGB"), dtype=np.int16)
    near = (np.abs(px - np.asarray(color, dtype=np.int16)) <= tol).all(axis=-1)
    return float(near.mean())


@pytest.mark.timeout(120)
def test_report_renders_in_chromium(fleet_store: Store, topo: Topology,
                                    tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian chromium (DESIGN.md)")
    onboard(fleet_store, topo)
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo)
    html = build_report(fleet_store, tmp_path / "out").html_path
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.goto(html.as_uri())
            page.wait_for_load_state("load")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)

            ledger = page.locator("#ledger")
            assert ledger.is_visible()
            box = ledger.bounding_box()
            assert box and box["width"] > 600 and box["height"] > 150
            assert page.locator("#ledger tbody tr").count() == 7
            assert page.locator("#ledger tr[data-step=goodput] td.num").first.inner_text() \
                .startswith("200.9")
            waterfall = page.locator("#waterfall")
            assert waterfall.is_visible()
            assert waterfall.evaluate("img => img.complete && img.naturalWidth") > 500

            rack_map = page.locator("#rack-map")
            assert rack_map.is_visible()
            map_box = rack_map.bounding_box()
            assert map_box and map_box["width"] > 600 and map_box["height"] > 200
            racks = page.locator("#rack-map .rack")
            assert racks.count() == 7
            for i in range(7):
                b = racks.nth(i).bounding_box()
                assert b and b["width"] > 100 and b["height"] > 100
            assert page.locator("#rack-map .tray").count() == 7 * 18
            assert page.locator("#rack-map .tray.finding").count() == 2  # slow GPU, bad cable

            map_png = tmp_path / "rack-map.png"
            rack_map.screenshot(path=str(map_png))
        finally:
            browser.close()
    # Pixels: the rack map shows production racks in their colour and the finding borders.
    img = Image.open(map_png)
    assert _share(img, _rgb("#2f9e44")) > 0.05
    assert _share(img, _rgb("#e03131")) > 0.0005
    full = Image.open(shot)
    assert full.size[0] >= 1280 and full.size[1] > 2000
    # Offline: the page asked for nothing but itself and inline data.
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
