"""Soaks in the report and the statement: `recovery.soak` events written through the typed
payload model (as `job soak` records them) become report.json's soak section (newest first,
each figure labelled measured with its host and schedule), the page and the statement block
show them escaped, the disclosure carries them, and `report verify` recomputes the section
from the bundle: an untampered bundle verifies, a changed soak figure fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rackscale.report import build_report
from rackscale.report.disclosure import validate_disclosure
from rackscale.report.document import validate_document
from rackscale.report.redact import redact_bundle
from rackscale.report.sign import keygen, sign_bundle
from rackscale.report.soak import render_soak, soak_section
from rackscale.report.verify import verify_bundle
from rackscale.store import Kind, RecoverySoakV1, Store

GPU = "us-east/r01/c01/gpu1"
HOSTILE_HOST = "<b>lab&host</b>"


def fault(index: int, **kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "index": index, "cause": "GPU", "action": "gpu_dead", "component": GPU,
        "injected_at_s": 60.0 + 30 * index, "detected": True, "time_to_detect_s": 1.25,
        "named": {"component": GPU, "kind": "gpu_dead", "symptom": "fail_stop"},
        "named_vs_injected": "exact", "recovered": True,
        "badput_s": {"detection": 1.25, "restart": 4.0, "lost_work": 2.5}}
    return base | kw


def soak(job: str, **kw: Any) -> RecoverySoakV1:
    base: dict[str, Any] = {
        "job": job, "host": "lab-host-1", "lab": "/srv/lab",
        "schedule": {"file": "/srv/soak/schedule.json", "seed": 7, "failure_model": "llama3",
                     "faults": 2, "rate_scale": 1500.0},
        "window_s": 300.0, "clean_step_s": 0.5,
        "ettr": {"value": 0.9123, "lo": 0.8811, "hi": 0.9402,
                 "method": "95% block bootstrap over the run's time"},
        "goodput": {"kept_steps_per_s": 1.82, "clean_steps_per_s": 2.0,
                    "of_slots": {"value": 0.7, "lo": 0.68, "hi": 0.72},
                    "means": "useful GPU-time over the GPU-time of every slot held"},
        "badput_s": {"initial_start": 3.0, "detection": 2.5, "restart": 8.0,
                     "lost_work": 5.0, "other": 7.81},
        "faults": [fault(0), fault(1, detected=False, time_to_detect_s=None, named=None,
                                   named_vs_injected="not detected", recovered=False,
                                   badput_s={"running_degraded": 12.0})],
        "load_avg": {"start": [0.5, 0.75, 1.0], "end": [1.5, 1.25, 1.0]}}
    return RecoverySoakV1.model_validate(base | kw)


def record(store: Store, *soaks: RecoverySoakV1) -> None:
    for s in soaks:
        store.append_event(f"job/{s.job}", Kind.RECOVERY_SOAK, payload=s, actor="rackscale-soak",
                           reason="soak (test)")


def signed(out: Path, tmp_path: Path) -> Path:
    key = tmp_path / "keys" / "signing.pem"
    if not key.exists():
        keygen(key)
    sign_bundle(out, key)
    return key.with_name(key.name + ".pub")


def test_soaks_become_the_section_newest_first_labelled_measured(fleet_store: Store,
                                                                  tmp_path: Path) -> None:
    record(fleet_store, soak("s-old", host="lab-host-0"),
           soak("s-new", ettr={"value": 0.8, "lo": 0.75, "hi": 0.85, "method": "bootstrap"}))
    built = build_report(fleet_store, tmp_path / "rep")
    validate_document(built.doc)
    sec = built.doc["soak"]
    assert sec["status"] == "measured"
    assert sec["label"] == "measured under a sustained workload"
    assert [r["job"] for r in sec["soaks"]] == ["s-new", "s-old"]
    assert sec["hosts"] == ["lab-host-0", "lab-host-1"]
    new, old = sec["soaks"]
    assert new["component"] == "job/s-new" and new["time"]
    assert new["ettr"] == {"value": 0.8, "lo": 0.75, "hi": 0.85, "method": "bootstrap"}
    assert old["ettr"]["value"] == 0.9123 and old["window_s"] == 300.0
    assert old["schedule"] == {"file": "/srv/soak/schedule.json", "seed": 7,
                               "failure_model": "llama3", "faults": 2, "rate_scale": 1500.0}
    assert old["goodput"]["of_slots"]["value"] == 0.7
    assert old["badput_s"]["restart"] == 8.0 and old["badput_total_s"] == 26.31
    f0, f1 = old["faults"]
    assert f0["time_to_detect_s"] == 1.25 and f0["named_vs_injected"] == "exact"
    assert f0["badput_total_s"] == 7.75
    assert f1["detected"] is False and f1["named_vs_injected"] == "not detected"
    assert old["faults_detected"] == 1
    assert old["named_vs_injected"] == {"exact": 1, "not detected": 1}
    assert old["measured"] == {"basis": "measured", "where": "lab-host-0 (lab /srv/lab)",
                               "on": "job s-old",
                               "schedule": "failure model llama3, seed 7, 2 faults, "
                                           "rates x1,500"}
    assert old["predicted"] is None

    evidence = tmp_path / "rep" / "evidence" / "recovery.jsonl"
    kinds = [json.loads(line)["kind"] for line in evidence.read_text().splitlines()]
    assert kinds == ["recovery.soak", "recovery.soak"]

    disc = json.loads((tmp_path / "rep" / "disclosure.json").read_text())
    validate_disclosure(disc)
    d_new = disc["soak"]["soaks"][0]
    assert disc["soak"]["status"] == "measured" and d_new["job"] == "s-new"
    assert d_new["ettr"]["value"] == 0.8 and d_new["host"] == "lab-host-1"
    assert d_new["provenance"]["basis"] == "measured"
    assert "lab-host-1" in d_new["provenance"]["where"]
    assert "failure model llama3, seed 7" in d_new["provenance"]["on"]
    assert d_new["faults"][0]["time_to_detect_s"] == 1.25


def test_the_page_and_the_statement_show_the_soaks_escaped(fleet_store: Store,
                                                           tmp_path: Path) -> None:
    record(fleet_store, soak("s1", host=HOSTILE_HOST))
    build_report(fleet_store, tmp_path / "rep")
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Measured under a sustained workload" in html
    assert 'id="soak-1-figures"' in html and 'id="soak-1-faults"' in html
    assert "0.9123 [0.8811, 0.9402]" in html  # ETTR with its 95% interval
    assert "failure model llama3, seed 7, 2 faults, rates x1,500" in html
    assert "measured (real)" in html and "not detected" in html
    assert "start 0.5 / 0.75 / 1; end 1.5 / 1.25 / 1" in html
    assert HOSTILE_HOST not in html
    assert "&lt;b&gt;lab&amp;host&lt;/b&gt;" in html
    statement = html[html.index('<section id="statement">'):]
    statement = statement[:statement.index("</section>")]
    assert 'id="statement-soak"' in statement and "0.9123 [0.8811, 0.9402]" in statement
    assert "&lt;b&gt;lab&amp;host&lt;/b&gt;" in statement


def test_a_prediction_is_shown_beside_the_measured_ettr_as_simulated() -> None:
    """`predicted` (the simulator's ETTR for the same schedule) is optional in the event;
    the section keeps it and labels it simulated, the page shows it beside the measured."""
    payload = soak("s1").model_dump(mode="json") | {
        "predicted": {"ettr": 0.9311, "simulated": True, "trials": 200}}
    ev = {"seq": 5, "time": "2025-01-01T00:00:00+00:00", "component": "job/s1",
          "kind": "recovery.soak", "payload": payload, "actor": "t", "reason": ""}
    sec = soak_section([ev])
    assert sec["soaks"][0]["predicted"] == {"ettr": 0.9311, "simulated": True, "trials": 200,
                                            "basis": "simulated"}
    html = render_soak(sec)
    assert "predicted ETTR" in html and "0.9311" in html and "simulated (twin)" in html
    assert "0.9123 [0.8811, 0.9402]" in html


def test_no_soak_says_so_and_how_to_run_one(fleet_store: Store, tmp_path: Path) -> None:
    built = build_report(fleet_store, tmp_path / "rep")
    assert built.doc["soak"]["status"] == "not_run"
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "no soak run yet" in html and "rackscale job soak --lab DIR" in html
    assert 'id="statement-soak"' not in html
    disc = json.loads((tmp_path / "rep" / "disclosure.json").read_text())
    assert disc["soak"] == {"status": "not_run", "soaks": []}


def test_verify_recomputes_the_soak_section(fleet_store: Store, tmp_path: Path) -> None:
    record(fleet_store, soak("s1"))
    out = tmp_path / "rep"
    build_report(fleet_store, out)
    pub = signed(out, tmp_path)
    result = verify_bundle(out, pub)
    assert result.ok, result.first_problem


def test_a_changed_soak_figure_in_report_json_fails_verification(fleet_store: Store,
                                                                 tmp_path: Path) -> None:
    """Changed and signed again: the signature holds, the recomputation does not."""
    record(fleet_store, soak("s1"))
    out = tmp_path / "rep"
    build_report(fleet_store, out)
    path = out / "report.json"
    doc = json.loads(path.read_text())
    doc["soak"]["soaks"][0]["ettr"]["value"] = 0.99
    path.write_text(json.dumps(doc))
    result = verify_bundle(out, signed(out, tmp_path))
    assert not result.ok
    assert "soak.soaks[0].ettr.value" in (result.first_problem or "")


def test_a_changed_soak_event_in_the_evidence_fails_verification(fleet_store: Store,
                                                                 tmp_path: Path) -> None:
    record(fleet_store, soak("s1"))
    out = tmp_path / "rep"
    build_report(fleet_store, out)
    pub = signed(out, tmp_path)
    path = out / "evidence" / "recovery.jsonl"
    ev = json.loads(path.read_text())
    ev["payload"]["faults"][0]["time_to_detect_s"] = 0.01
    path.write_text(json.dumps(ev, sort_keys=True, separators=(",", ":")) + "\n")
    result = verify_bundle(out, pub)
    assert not result.ok
    assert "evidence/recovery.jsonl" in (result.first_problem or "")


def test_a_redacted_bundle_with_a_soak_verifies(fleet_store: Store, tmp_path: Path) -> None:
    record(fleet_store, soak("s1"))
    build_report(fleet_store, tmp_path / "rep")
    rdoc = redact_bundle(tmp_path / "rep", tmp_path / "public", b"k" * 32)
    assert rdoc["soak"]["status"] == "measured"
    result = verify_bundle(tmp_path / "public", signed(tmp_path / "public", tmp_path))
    assert result.ok, result.first_problem


def test_the_soak_section_passes_axe_in_chromium(fleet_store: Store, tmp_path: Path) -> None:
    """The section's tables and labels (two soaks, one with a prediction-free fault table)
    add no serious or critical accessibility violation (axe-core in Chromium)."""
    from playwright.sync_api import sync_playwright

    from .test_browser import AXE, _launch

    record(fleet_store, soak("s-old"), soak("s-new"))
    built = build_report(fleet_store, tmp_path / "rep")
    with sync_playwright() as p:
        browser = _launch(p)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(built.html_path.as_uri())
            assert page.locator("#soak .card").count() == 2
            assert page.locator("#statement-soak tbody tr").count() == 2
            page.add_script_tag(content=AXE.read_text())
            result = page.evaluate("async () => { const r = await axe.run(document); "
                                   "return {passes: r.passes.length, violations: r.violations"
                                   ".map(v => [v.id, v.impact, v.nodes.length])}; }")
        finally:
            browser.close()
    assert result["passes"] > 10  # axe ran its rules
    bad = [v for v in result["violations"] if v[1] in ("serious", "critical")]
    assert not bad, bad


def test_a_report_from_before_the_soak_section_still_verifies(fleet_store: Store,
                                                             tmp_path: Path) -> None:
    """A report signed before the section existed has no `soak`: it agrees with evidence
    that holds no soak, and not with evidence that holds one."""
    out = tmp_path / "rep"
    build_report(fleet_store, out)
    path = out / "report.json"
    doc = json.loads(path.read_text())
    del doc["soak"]
    path.write_text(json.dumps(doc))
    result = verify_bundle(out, signed(out, tmp_path / "k1"))
    assert result.ok, result.first_problem

    record(fleet_store, soak("s1"))
    out2 = tmp_path / "rep2"
    build_report(fleet_store, out2)
    doc = json.loads((out2 / "report.json").read_text())
    del doc["soak"]
    (out2 / "report.json").write_text(json.dumps(doc))
    result = verify_bundle(out2, signed(out2, tmp_path / "k2"))
    assert not result.ok and "soak" in (result.first_problem or "")
