"""`report diff` on two demo-like runs of the real rooms (lifecycle, certify on the twin,
triage, simulate, report) that differ only in the faults file: of the two report.json files,
and of the two runs in the store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.certify import service as certify_service
from rackscale.cli import app
from rackscale.cli import certify as certify_cli
from rackscale.cli import lifecycle as lifecycle_cli
from rackscale.cli import simulate as simulate_cli
from rackscale.cli.demo import DemoContext
from rackscale.cli.report import step_report
from rackscale.faults.spec import demo_faults_path
from rackscale.fleet import Topology, seed_fleet
from rackscale.report import validate_document
from rackscale.store import Store, load_topology

# The shipped demo faults without the coolant and sdc faults, plus a dead GPU and a dead NIC.
FAULTS_B = """version: 1
faults:
  - {target: us-east/r02/c07/gpu3, kind: slow_gpu, severity: 0.88}
  - {target: us-east/r04/s02, kind: nvlink_switch_down}
  - {target: us-west/r01/c03/nic2, kind: bad_cable, severity: 0.4}
  - {target: us-west/leaf-rail1-0, kind: leaf_degraded, severity: 0.6}
  - {target: us-west/r02/c05/gpu0, kind: gpu_dead}
  - {target: us-east/r03/c09/nic1, kind: nic_dead}
"""


def _key(f: dict) -> tuple[str, str]:
    return f["component"], f["kind"]


@pytest.mark.timeout(400)
def test_diff_of_two_runs_with_different_faults(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(f"sqlite:///{tmp_path}/rackscale.db")
    topo = Topology.build(seed_fleet("seed-504"))
    load_topology(store, topo)
    ctx = DemoContext(topo=topo, store=store, seed=7, data_dir=tmp_path)
    faults_b = tmp_path / "faults-b.yaml"
    faults_b.write_text(FAULTS_B)
    report = tmp_path / "report" / "report.json"
    try:
        lifecycle_cli.step_onboarding(ctx)
        docs = []
        for faults in (demo_faults_path(), str(faults_b)):
            monkeypatch.setattr(certify_service, "demo_faults_path", lambda f=faults: f)
            for step in (certify_cli.step_certify, lifecycle_cli.step_triage,
                         simulate_cli.step_simulate, step_report):
                step(ctx)
            docs.append(json.loads(report.read_text()))
            shutil.copy(report, tmp_path / f"run{len(docs)}.json")
    finally:
        store.close()
    old, new = docs
    validate_document(new)  # with its changes and history
    cleared = {_key(f) for f in old["findings"]} - {_key(f) for f in new["findings"]}
    added = {_key(f) for f in new["findings"]} - {_key(f) for f in old["findings"]}
    # the faults that differ are found and differ in the findings
    assert ("us-west/r03/cdu", "coolant_flow_low") in cleared
    assert any(c.startswith("us-west/r02/c05") for c, _ in added), added

    r = CliRunner().invoke(app, ["report", "diff", str(tmp_path / "run1.json"),
                                 str(tmp_path / "run2.json"), "--json"])
    assert r.exit_code == 0, r.output
    diff = json.loads(r.stdout)
    assert {_key(f) for f in diff["findings_new"]} == added
    assert {_key(f) for f in diff["findings_cleared"]} == cleared
    steps = {s["key"]: s for s in diff["ledger"]}
    for a, b in zip(old["ledger"], new["ledger"], strict=True):
        if a["count"] != b["count"]:
            assert steps[a["key"]]["delta"] == pytest.approx(b["count"] - a["count"], abs=0.05)
    assert steps, "two runs with different faults left the ledger unchanged"
    # the second build compared itself with the first one it replaced
    assert new["changes"]["findings_new"] == diff["findings_new"]
    assert [h["last_event_seq"] for h in new["history"]] == [old["last_event_seq"],
                                                            new["last_event_seq"]]
    html = (tmp_path / "report" / "report.html").read_text()
    assert 'id="diff-ledger"' in html and 'id="history"' in html
    for component, _ in added | cleared:
        assert component in html

    r = CliRunner().invoke(app, ["report", "diff", str(tmp_path / "run1.json"),
                                 str(tmp_path / "run2.json")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for component, kind in added | cleared:
        assert f"{component} {kind}" in r.output

    # the same two runs named in the store: each report rebuilt as the store stood after its
    # run gives the diff of the two files
    db = f"sqlite:///{tmp_path}/rackscale.db"
    store = Store(db)
    runs = [e.payload["run_id"] for e in store.events(kind="certify.run")]
    store.close()
    r = CliRunner().invoke(app, ["report", "diff", "--db", db, *runs, "--json"])
    assert r.exit_code == 0, r.output
    by_store = json.loads(r.stdout)
    for key in ("ledger", "findings_new", "findings_cleared", "racks", "job_shapes"):
        assert by_store[key] == diff[key], key
    assert [by_store[s]["last_event_seq"] for s in ("old", "new")] == [
        old["last_event_seq"], new["last_event_seq"]]
    r = CliRunner().invoke(app, ["report", "diff", "--db", db, runs[0],
                                 str(tmp_path / "run1.json"), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["empty"], r.output
