"""Recovery incidents in the report and the statement: `recovery.incident` events written the
way the supervisor writes them (the Recorder, validated payloads) become report.json's
recovery section (per-incident times, badput buckets, measured where) and the disclosure's
recovery figures, and the signed bundle still verifies."""

from __future__ import annotations

import json
from pathlib import Path

from rackscale.recovery.record import Recorder
from rackscale.report import build_report
from rackscale.report.disclosure import validate_disclosure
from rackscale.report.document import validate_document
from rackscale.report.sign import keygen, sign_bundle
from rackscale.report.verify import verify_bundle
from rackscale.store import RecoveryIncidentV1 as IncidentPayload
from rackscale.store import Store

GPU0, GPU1 = "us-east/r01/c01/gpu0", "us-east/r01/c01/gpu1"


def incident(component: str, **kw: object) -> IncidentPayload:
    base: dict[str, object] = dict(
        job="j1", attempt=0, symptom="fail_stop", rank=1, component=component,
        fault_kind="gpu_dead", spare="us-east/r01/c02/gpu0", evidence={"exit_code": -9},
        detected_at=1_700_000_000.0, detect_s=0.8, localize_s=0.01, stop_s=0.2,
        restart_s=0.5, start_s=1.5, restore_s=0.7, first_step_s=3.0, downtime_s=3.5,
        ckpt_id="ck-000010", ckpt_step=10, work_lost_steps=4, step_s=0.25, host="node-a")
    return IncidentPayload.model_validate(base | kw)


def record(store: Store, tmp: Path, *incs: IncidentPayload) -> None:
    rec = Recorder(tmp, store)
    for inc in incs:
        rec.incident(inc.model_copy(update={"fault_kind": rec.exclude(inc)}))


def test_incidents_become_the_recovery_section_and_the_disclosure(
        fleet_store: Store, tmp_path: Path) -> None:
    record(fleet_store, tmp_path,
           incident(GPU0),
           incident(GPU1, attempt=1, symptom="straggler", detect_s=2.0, downtime_s=5.0,
                    restore_s=1.0, work_lost_steps=2, step_s=0.5, host="node-b"))
    built = build_report(fleet_store, tmp_path / "rep")
    validate_document(built.doc)
    sec = built.doc["recovery"]
    assert sec["status"] == "measured" and len(sec["incidents"]) == 2
    first, second = sec["incidents"]
    assert first["detect_s"] == 0.8 and first["restore_s"] == 0.7
    assert first["badput_s"] == {"detection": 0.8, "restart": 2.8, "restore": 0.7,
                                 "lost_work": 1.0}
    assert second["badput_s"]["lost_work"] == 1.0 and second["badput_s"]["restart"] == 4.0
    assert sec["badput_s"] == {"detection": 2.8, "restart": 6.8, "restore": 1.7,
                               "lost_work": 2.0, "total": 13.3}
    assert first["restart_cost_s"] == 4.3 and second["restart_cost_s"] == 7.0
    assert sec["median_restart_cost_s"] == 5.65
    assert first["measured"] == {"basis": "measured", "where": "supervisor of job j1 on "
                                 "node-a", "on": GPU0}
    html = (tmp_path / "rep" / "report.html").read_text()
    assert 'id="recovery-incidents"' in html and "node-b" in html

    disc = json.loads((tmp_path / "rep" / "disclosure.json").read_text())
    validate_disclosure(disc)
    rec = disc["recovery"]
    assert rec["status"] == "measured" and len(rec["incidents"]) == 2
    d0 = rec["incidents"][0]
    assert (d0["kind"], d0["component"], d0["job"]) == ("fail_stop", GPU0, "j1")
    assert d0["time_to_detect_s"] == 0.8 and d0["time_to_restore_s"] == 0.7
    assert d0["time_to_first_step_s"] == 3.0 and d0["downtime_s"] == 3.5
    assert d0["work_lost_steps"] == 4 and d0["work_lost_s"] == 1.0
    assert d0["provenance"]["basis"] == "measured" and "node-a" in d0["provenance"]["where"]
    evidence = tmp_path / "rep" / "evidence" / "recovery.jsonl"
    kinds = [json.loads(line)["kind"] for line in evidence.read_text().splitlines()]
    assert kinds.count("recovery.incident") == 2

    key = tmp_path / "keys" / "signing.pem"
    keygen(key)
    sign_bundle(tmp_path / "rep", key)
    result = verify_bundle(tmp_path / "rep", key.with_name(key.name + ".pub"))
    assert result.ok, result.first_problem


def test_a_changed_recovery_figure_fails_verification(fleet_store: Store,
                                                      tmp_path: Path) -> None:
    record(fleet_store, tmp_path, incident(GPU0))
    build_report(fleet_store, tmp_path / "rep")
    path = tmp_path / "rep" / "report.json"
    doc = json.loads(path.read_text())
    doc["recovery"]["incidents"][0]["detect_s"] = 0.1
    path.write_text(json.dumps(doc))
    key = tmp_path / "keys" / "signing.pem"
    keygen(key)
    sign_bundle(tmp_path / "rep", key)
    result = verify_bundle(tmp_path / "rep", key.with_name(key.name + ".pub"))
    assert not result.ok
    assert "recovery.incidents[0].detect_s" in (result.first_problem or "")


def test_an_unfinished_restart_counts_no_restart_badput(fleet_store: Store,
                                                        tmp_path: Path) -> None:
    record(fleet_store, tmp_path,
           incident(GPU0, outcome="no_spare", spare=None, restart_s=None, start_s=None,
                    restore_s=None, first_step_s=None, downtime_s=None, step_s=None))
    sec = build_report(fleet_store, tmp_path / "rep").doc["recovery"]
    row = sec["incidents"][0]
    assert row["restart_cost_s"] is None and sec["median_restart_cost_s"] is None
    assert row["badput_s"] == {"detection": 0.8, "restart": None, "restore": None,
                               "lost_work": None}
    assert sec["badput_s"]["total"] == 0.8


def test_no_incident_says_how_to_get_one(fleet_store: Store, tmp_path: Path) -> None:
    built = build_report(fleet_store, tmp_path / "rep")
    assert built.doc["recovery"] == {"status": "not_run"}
    disc = json.loads((tmp_path / "rep" / "disclosure.json").read_text())
    assert disc["recovery"]["incidents"] == []
    assert "no recovery incident recorded" in (tmp_path / "rep" / "report.html").read_text()


def test_a_redacted_bundle_with_incidents_verifies(fleet_store: Store, tmp_path: Path) -> None:
    """The redacted report computes its recovery section from the redacted recovery events,
    as verify does: before, it said not_run and the redacted statement failed to verify."""
    from rackscale.report.redact import redact_bundle

    record(fleet_store, tmp_path, incident(GPU0))
    build_report(fleet_store, tmp_path / "rep")
    rdoc = redact_bundle(tmp_path / "rep", tmp_path / "public", b"k" * 32)
    assert rdoc["recovery"]["status"] == "measured"
    key = tmp_path / "keys" / "signing.pem"
    keygen(key)
    sign_bundle(tmp_path / "public", key)
    result = verify_bundle(tmp_path / "public", key.with_name(key.name + ".pub"))
    assert result.ok, result.first_problem
