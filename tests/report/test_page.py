"""report.html pieces read by a buyer: numbers, colours, coverage, lifecycle timeline."""

from __future__ import annotations

import math
import re
from itertools import combinations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rackscale.report import fmt
from rackscale.report.page_events import coverage, lifecycle
from rackscale.report.palette import BASIS_COLORS, LOSS_COLOR, STATE_STYLE

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12)


@given(finite, st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_numbers_are_never_in_scientific_notation(v: float, err: float) -> None:
    for text in (fmt.number(v), fmt.plus_minus(v, err), fmt.interval(v, v + err)):
        assert not re.search(r"\de[+-]?\d", text), text
    head = fmt.number(v).replace(",", "")
    if abs(v) >= 1e-6:  # what is shown is the value, to its shown precision
        assert math.isclose(float(head), v, rel_tol=1e-3, abs_tol=1e-6)


def test_plus_minus_keeps_the_digits_that_mean_something() -> None:
    assert fmt.plus_minus(8.783e-05, 5.1e-06) == "0.0000878 ± 0.0000051"
    assert fmt.plus_minus(0.934, 0.0213) == "0.934 ± 0.021"
    assert fmt.plus_minus(1234.5, 12.0) == "1,234 ± 12" or fmt.plus_minus(1234.5, 12.0) \
        == "1,235 ± 12"
    assert fmt.number(8.783e-05) == "0.00008783"
    assert fmt.number(0.0) == "0"


# Machado, Oliveira & Fernandes (2009) at severity 1, on linear RGB
CVD = {
    "protan": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                        [-0.003882, -0.048116, 1.051998]]),
    "deutan": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                        [-0.011820, 0.042940, 0.968881]]),
    "tritan": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                        [0.004733, 0.691367, 0.303900]]),
    "normal": np.eye(3),
}


def _lab(hex_color: str, matrix: np.ndarray) -> np.ndarray:
    h = hex_color.lstrip("#")
    if len(h) == 3:
        h = "".join(c * 2 for c in h)
    srgb = np.array([int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    lin = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    lin = np.clip(matrix @ lin, 0, 1)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                    [0.0193, 0.1192, 0.9505]]) @ lin / np.array([0.9505, 1.0, 1.089])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_basis_colours_are_told_apart_with_colour_vision_deficiencies() -> None:
    """spec, inventory and recorded bars (and every other basis, and the loss) stay at least
    a clear colour difference apart for normal, protan, deutan and tritan vision."""
    colours = {**BASIS_COLORS, "loss": LOSS_COLOR}
    for name, m in CVD.items():
        for (a, ca), (b, cb) in combinations(colours.items(), 2):
            de = float(np.linalg.norm(_lab(ca, m) - _lab(cb, m)))
            assert de >= 12, f"{a} and {b} are {de:.1f} apart ({name})"


def _contrast(bg: str, fg: str) -> float:
    """WCAG 2 contrast ratio of two sRGB colours."""
    def rel(c: str) -> float:
        h = c.lstrip("#")
        h = "".join(x * 2 for x in h) if len(h) == 3 else h
        s = np.array([int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)])
        lin = np.where(s <= 0.04045, s / 12.92, ((s + 0.055) / 1.055) ** 2.4)
        return float(lin @ [0.2126, 0.7152, 0.0722])
    hi, lo = sorted((rel(bg), rel(fg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_state_labels_meet_wcag_aa_contrast() -> None:
    for state, (bg, fg) in STATE_STYLE.items():
        assert _contrast(bg, fg) >= 4.5, state


def test_coverage_never_says_pass_beside_a_missed_stage() -> None:
    doc = {"coverage": {"status": "ran", "stages": ["gpu", "tray", "domain", "multi-rack"],
                        "verdicts": {"pass": 2}, "rows": [
                            {"component": "us-east/r01", "kind": "rack", "verdict": "pass",
                             "stages_passed": ["gpu", "tray", "domain"]},
                            {"component": "us-east/r02", "kind": "rack", "verdict": "pass",
                             "stages_passed": ["gpu", "tray", "domain", "multi-rack"]}]}}
    html = coverage(doc)
    r01 = html[html.index("us-east/r01"):html.index("us-east/r02")]
    assert "<td>pass</td>" not in r01
    assert "partial: multi-rack not passed" in r01 and "not passed" in r01
    assert "<td>pass</td>" in html[html.index("us-east/r02"):]


def _ev(seq: int, cid: str, kind: str, payload: dict) -> dict:
    return {"seq": seq, "time": f"2026-12-01T10:{seq:02d}:00+00:00", "component": cid,
            "kind": kind, "payload": payload, "actor": "lifecycle", "reason": "why"}


def test_lifecycle_is_a_timeline_by_rack_newest_first() -> None:
    events = [_ev(1, "us-east/r01", "lifecycle.transition", {"from": None, "to": "received"}),
              _ev(2, "us-east/r02/c03", "lifecycle.transition", {"from": "burn_in",
                                                                 "to": "production"}),
              _ev(3, "us-east/r01/cdu", "lifecycle.interlock", {"rule": "cooling_verify",
                                                                "action": "hold",
                                                                "flow_lpm": 110.0,
                                                                "required_lpm": 220.0}),
              _ev(4, "us-east/r02", "lifecycle.transition", {"from": "production",
                                                             "to": "maintenance"})]
    doc = {"lifecycle": {"status": "ran", "events_total": 4, "by_kind": {}, "rack_states": {},
                         "tray_states": {}, "events": events, "interlocks": []}}
    html = lifecycle(doc)
    # racks with the newest events first; inside a rack, newest first
    assert html.index("<code>us-east/r02</code>") < html.index("<code>us-east/r01</code>")
    r02 = html[html.index("<code>us-east/r02</code>"):html.index("<code>us-east/r01</code>")]
    assert r02.index("rack: production → maintenance") < r02.index("c03: burn_in → production")
    assert "cdu: interlock cooling_verify: hold (flow 110.0 of 220.0 L/min)" in html
    # the raw event is folded, one click away
    assert html.count("<details><summary>raw event</summary>") == 4
    assert "<td>{" not in html and "&quot;maintenance&quot;" in html


def test_goodput_section_has_no_scientific_notation() -> None:
    from rackscale.report.page import _goodput

    doc = {"simulation": {"status": "ran", "seq": 9, "payload": {
        "run_id": "sim-1", "fleet": "seed-504", "simulated": True, "seed": 1,
        "failure_model": "llama3", "ckpt_interval_min": 30,
        "ettr": {"mean": 0.99991, "ci95": 8.783e-05},
        "goodput": {"runtime": 0.99991, "total": 0.4},
        "goodput_ci95": {"runtime": 8.783e-05}, "job_gpus": 72, "days": 30, "trials": 20,
        "job_mttf_h": 1.234e6}}, "sweep": {"status": "not_run"}}
    html = _goodput(doc)
    assert not re.search(r"\de[+-]?\d", html), html
    assert "runtime 0.999910 ± 0.000088" in html


def test_every_table_header_of_the_page_is_a_column_header() -> None:
    """Every table's header row is written one way (report/html.py): its cells are column
    headers for screen readers, and every table has its own id."""
    from html.parser import HTMLParser

    from rackscale.fleet import Topology, seed_fleet
    from rackscale.report import build_document, build_ledger, render_html
    from rackscale.report.diff import diff_documents

    from .scale import memory_view

    topo = Topology.build(seed_fleet("seed-504"))
    old = memory_view(topo, [("us-east/r03/cdu", "coolant_flow_low")])
    new = memory_view(topo, [("us-east/r01/c03/gpu1", "slow_gpu")], {"us-west/r02"})
    doc = build_document(new, build_ledger(new))
    doc["changes"] = diff_documents(build_document(old, build_ledger(old)), doc)

    class Heads(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.in_head, self.heads, self.ids = False, [], []

        def handle_starttag(self, tag: str, attrs: list) -> None:
            a = dict(attrs)
            if tag == "table":
                self.ids.append(a.get("id"))
            self.in_head = self.in_head or tag == "thead"
            if tag == "th" and self.in_head:
                self.heads.append(a.get("scope"))

        def handle_endtag(self, tag: str) -> None:
            self.in_head = self.in_head and tag != "thead"

    p = Heads()
    p.feed(render_html(doc))
    assert len(p.heads) > 40 and set(p.heads) == {"col"}
    assert {"ledger", "job-shapes", "findings", "finding-groups", "method", "diff-ledger",
            "diff-racks"} <= set(p.ids)
    named = [i for i in p.ids if i]
    assert len(named) == len(set(named))


def _step(delta: int, lost_delta: dict[str, int]) -> dict:
    return {"key": "certified", "label": "certified", "old": 100, "new": 100 + delta,
            "delta": delta, "lost_delta": lost_delta, "why": {}}


def test_a_loss_that_shrank_is_shown_as_better_and_one_that_grew_as_worse() -> None:
    from rackscale.report.page_changes import diff_tables
    diff = {"empty": False, "ledger": [_step(8, {"finding": -8, "drained": 3})],
            "findings_new": [], "findings_cleared": [], "racks": [], "job_shapes": []}
    page = diff_tables(diff)
    # usable GPUs up is better; GPUs lost to findings down is better; lost to drains up, worse
    assert re.findall(r'<span class="(\w+)">([+−]\d+)</span>', page) == [
        ("better", "+8"), ("better", "−8"), ("worse", "+3")]


def test_the_summary_says_which_racks_another_shape_covers() -> None:
    """On a mixed fleet a shape covers one pool of racks: "up to N expected" for it says so
    (the figure can sit far below the headline GPU count)."""
    from rackscale.fleet import FleetSpec, Topology
    from rackscale.report import build_document, build_ledger
    from rackscale.report.page import _summary

    from .scale import memory_view
    spec = FleetSpec.model_validate({"name": "mixed", "regions": [{"name": "r", "racks": [
        {"template": "gb200-nvl72", "count": 2}, {"template": "hgx-h100", "count": 2}]}]})
    topo = Topology.build(spec)
    doc = build_document(memory_view(topo, []), build_ledger(memory_view(topo, [])))
    others = [s for s in doc["job_shapes"] if not s["headline"]]
    best = max(others, key=lambda s: s["expected_gpus"])
    line = re.search(r"Other shapes: up to .*?; see job shapes\.", _summary(doc))
    assert line is not None
    assert f"<code>{best['name']}</code>" in line[0]
    assert f"on the <code>{best['template']}</code> racks only" in line[0]
    # one template: every shape covers the whole fleet, nothing to say
    seed = Topology.build(FleetSpec.model_validate({"name": "one", "regions": [{
        "name": "r", "racks": [{"template": "gb200-nvl72", "count": 2}]}]}))
    doc = build_document(memory_view(seed, []), build_ledger(memory_view(seed, [])))
    line = re.search(r"Other shapes: up to .*?; see job shapes\.", _summary(doc))
    assert line is not None and "racks only" not in line[0]
