"""report.html in a real headless Chromium (Debian chromium driven by Playwright)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from playwright.sync_api import sync_playwright

from rackscale.fleet import Topology
from rackscale.report import build_report
from rackscale.report.palette import STATE_STYLE
from rackscale.store import Store

from .events import SEED_FAULTS, certify, onboard, simulate, walk

AXE = Path(__file__).parent / "vendor" / "axe.min.js"

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
        pytest.fail(f"{CHROMIUM} not found: install Debian chromium (docs/architecture.md)")
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
    assert _share(img, _rgb(STATE_STYLE["production"][0])) > 0.05
    assert _share(img, _rgb("#d55e00")) > 0.0005  # finding borders
    full = Image.open(shot)
    assert full.size[0] >= 1280 and full.size[1] > 2000
    # Offline: the page asked for nothing but itself and inline data.
    assert all(u.startswith(("file:", "data:")) for u in requests), requests


def _launch(p: object) -> object:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} not found: install Debian chromium (docs/architecture.md)")
    return p.chromium.launch(executable_path=CHROMIUM, args=ARGS)  # type: ignore[attr-defined]


def _css_rgb(hex_color: str) -> str:
    r, g, b = _rgb(hex_color)
    return f"rgb({r}, {g}, {b})"


@pytest.mark.timeout(180)
def test_seed_page_shapes_maintenance_and_accessibility(fleet_store: Store, topo: Topology,
                                                        tmp_path: Path) -> None:
    """The buyer's page: job shapes side by side with the headline's shape named, a rack in
    maintenance drawn as maintenance (not as its trays' last state), and no serious or
    critical accessibility violation found by axe-core in Chromium."""
    onboard(fleet_store, topo)
    # us-west/r02 goes to maintenance; its trays keep their last state (production)
    walk(fleet_store, "us-west/r02", ["draining", "maintenance"], start="production")
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo)
    built = build_report(fleet_store, tmp_path / "out")
    with sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(built.html_path.as_uri())
            shapes = page.locator("#job-shapes tbody tr")
            assert shapes.count() == 4  # vr-nvl72: whole domain, 16 of 18 trays, 4 and 8 GPUs
            names = [shapes.nth(i).get_attribute("data-shape") for i in range(4)]
            assert names == ["whole-nvl72-domains", "nvl72-domains-16of18-trays",
                             "tray-aligned-4gpu", "tray-pairs-8gpu"]
            head = page.locator("#job-shapes tr.headline")
            assert head.count() == 1 and head.get_attribute("data-shape") == \
                built.doc["job_shape"]["name"]
            headline = page.locator("#headline").inner_text()
            assert "certified for job shape whole-nvl72-domains" in headline
            assert "whole 72-GPU NVLink domain" in headline
            # 16 of 18 trays: us-east/r02 and us-west/r01 lose one tray each and still run
            row = page.locator('#job-shapes tr[data-shape="nvl72-domains-16of18-trays"] td.num')
            assert row.nth(1).inner_text() == "4" and row.nth(2).inner_text() == "256"

            maint = STATE_STYLE["maintenance"][0]
            rack = page.locator('#rack-map .rack[data-rack="us-west/r02"]')
            assert rack.get_attribute("data-state") == "maintenance"
            colours = rack.locator(".tray").evaluate_all(
                "ts => ts.map(t => getComputedStyle(t).backgroundColor)")
            assert len(colours) == 18 and set(colours) == {_css_rgb(maint)}
            other = page.locator('#rack-map .rack[data-rack="us-west/r01"] .tray').first
            assert other.evaluate("t => getComputedStyle(t).backgroundColor") == \
                _css_rgb(STATE_STYLE["production"][0])

            page.add_script_tag(content=AXE.read_text())
            result = page.evaluate("async () => { const r = await axe.run(document); "
                                   "return {passes: r.passes.length, violations: r.violations"
                                   ".map(v => [v.id, v.impact, v.nodes.length])}; }")
        finally:
            browser.close()
    assert result["passes"] > 10  # axe ran its rules
    bad = [v for v in result["violations"] if v[1] in ("serious", "critical")]
    assert not bad, bad


@pytest.mark.timeout(300)
def test_fleet_scale_first_screen(tmp_path: Path) -> None:
    """At 128,016 GPUs (1,778 racks) the first screen shows the summary, the ledger and the
    aggregated map, and the page stays under 2 MB."""
    from .scale import scale_document

    doc = scale_document(1778)
    from rackscale.report import render_html

    html = render_html(doc)
    assert len(html.encode()) <= 2_000_000, len(html)
    path = tmp_path / "report.html"
    path.write_text(html)
    with sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(path.as_uri())
            page.screenshot(path=str(tmp_path / "first.png"))
            for sel in ("#summary", "#waterfall", "#map-overview", "#ledger"):
                box = page.locator(sel).bounding_box()
                assert box is not None and box["y"] < 1000 and box["height"] > 20, (sel, box)
            for sel in ("#summary", "#waterfall", "#map-overview"):
                box = page.locator(sel).bounding_box()
                assert box and box["y"] + box["height"] <= 1000, (sel, box)  # wholly visible
            tiles = page.locator("#map-overview .ov a")
            assert 2 <= tiles.count() <= 2 * 24  # aggregated: groups, not 1,778 racks
            assert page.locator("#rack-map .rack").count() <= 120
            assert page.locator("#rack-map .chip").count() + page.locator(
                "#rack-map .rack").count() == 1778
        finally:
            browser.close()
    assert "128,016 headline GPUs" in html
