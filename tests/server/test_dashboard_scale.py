"""The fleet page at 1,778 racks (128,016 GPUs) in Chromium: grouped and worst first as the
report's fleet map, a first screen that says where capacity went, every rack reachable, and
no serious or critical axe-core violation. The page is rendered from the report's in-memory
1,778-rack ledger (tests/report/scale.py): loading that fleet into a store takes minutes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from rackscale.report import build_ledger
from rackscale.server.pages import index_html
from rackscale.server.snapshot import Snapshot

from ..report.scale import scale_view
from .test_dashboard_browser import ARGS, AXE, CHROMIUM

pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None,
                                reason=f"{CHROMIUM} missing (scripts/bootstrap.sh test)")


def _snapshot(racks: int) -> Snapshot:
    view = scale_view(racks)
    ledger = build_ledger(view)
    counts: dict[tuple[str, str, str], int] = {}
    for r in ledger.racks:
        key = (r["state"] or "unenrolled", r["region"], r["template"])
        counts[key] = counts.get(key, 0) + r["gpus"]
    return Snapshot(seq=view.last_seq, built_s=0.0, fleet=view.topo.spec.name, ledger=ledger,
                    racks=ledger.racks, rack_index={r["id"]: i for i, r in
                                                    enumerate(ledger.racks)},
                    gpu_counts=counts, racks_per_leaf=view.topo.spec.network.racks_per_leaf)


@pytest.mark.timeout(300)
def test_fleet_page_at_1778_racks(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    snap = _snapshot(1778)
    t0 = time.perf_counter()
    html = index_html(snap, recent=[], incident_rows=[],
                      checkpoints={"configured": False, "checkpoints": [], "unreachable": {}})
    render_s = time.perf_counter() - t0
    assert len(html.encode()) < 2_500_000, len(html)
    assert render_s < 5, render_s
    path = tmp_path / "fleet.html"
    path.write_text(html)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(path.as_uri())
            page.screenshot(path=str(tmp_path / "first.png"))
            # First screen: the summary and the usable-capacity ledger, wholly.
            for sel in ("#summary", "#waterfall"):
                box = page.locator(sel).bounding_box()
                assert box and box["y"] + box["height"] <= 1000, (sel, box)
            assert "128,016 GPUs in 1,778 racks" in page.locator("#summary").inner_text()
            # Grouped: per region at most 24 group tiles, worst first (GPUs lost).
            regions = page.locator("#rackmap section.region")
            assert regions.count() == 2
            for i in range(2):
                ov = regions.nth(i).locator(".ov a")
                assert 2 <= ov.count() <= 24
                lost = [int(t.split("−")[1].replace(",", "")) for t in ov.all_inner_texts()]
                assert lost == sorted(lost, reverse=True) and lost[0] > 0
            # Tiles only for the worst racks; every rack a chip in its (folded) group.
            tiles = page.locator("#rackmap a.rack")
            assert 1 <= tiles.count() <= 120
            assert page.locator("#rackmap a.chip").count() == 1778
            assert page.locator("#rackmap details.grp[open]").count() == 0
            first = tiles.first
            assert int(first.get_attribute("data-usable") or 0) < 72  # a rack that lost GPUs
            assert first.locator(".st").inner_text() == first.get_attribute("data-state")
            # Findings: by kind first; the 334 rows with their evidence folded below.
            assert page.locator("#finding-kinds tbody tr").count() == 2  # slow GPU, switch
            assert not page.locator("#findings-all").evaluate("d => d.open")
            # A group tile opens its group.
            ov0 = regions.nth(0).locator(".ov a").first
            target = (ov0.get_attribute("href") or "#").lstrip("#")
            ov0.click()
            assert page.locator(f'details[id="{target}"]').evaluate("d => d.open")
            page.screenshot(path=str(tmp_path / "full.png"), full_page=True)
            page.add_script_tag(content=AXE.read_text())
            result = page.evaluate("async () => { const r = await axe.run(document); "
                                   "return r.violations.map(v => [v.id, v.impact, "
                                   "v.nodes.length]); }")
        finally:
            browser.close()
    bad = [v for v in result if v[1] in ("serious", "critical")]
    assert not bad, bad
