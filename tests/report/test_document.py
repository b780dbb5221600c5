"""report.json against its published schema; report.html self-contained."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from rackscale.fleet import Topology
from rackscale.report import build_report, report_schema, validate_document
from rackscale.store import Store

from .events import SEED_FAULTS, certify, onboard, simulate

SCHEMA_FILE = Path(__file__).parents[2] / "src/rackscale/report/report.schema.json"


@pytest.fixture
def full_store(fleet_store: Store, topo: Topology) -> Store:
    onboard(fleet_store, topo)
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo)
    return fleet_store


def test_schema_is_published_in_the_repo_and_is_valid() -> None:
    assert SCHEMA_FILE.is_file()
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema == report_schema()
    jsonschema.Draft202012Validator.check_schema(schema)


def test_report_json_validates(full_store: Store, tmp_path: Path) -> None:
    # Build speed is a benchmark (bench/), not a timed test: a loaded CI machine is no clock.
    built = build_report(full_store, tmp_path / "out")
    # strict JSON: the simulated run's infinite MTBF became null, not `Infinity`
    doc = json.loads(built.json_path.read_text(),
                     parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["simulation"]["payload"]["job_mtbf_model_h"] is None
    validate_document(doc)
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    assert [s["count"] for s in doc["ledger"]] == [s.count for s in built.ledger.steps]
    assert doc["fleet"]["headline_gpus"] == full_store.count_components(kind="gpu") == 504
    assert doc["coverage"]["status"] == "ran" and "domain" in doc["coverage"]["stages"]
    assert doc["lifecycle"]["rack_states"] == {"production": 7}
    assert doc["lifecycle"]["events_total"] == full_store.count_events("lifecycle.")
    assert doc["simulation"]["payload"]["seed"] == 7
    assert len(doc["method"]) == 7 and all(m["how"] for m in doc["method"])
    assert all(code in doc["reasons"] for s in doc["ledger"] for code in s["lost"])


@pytest.mark.parametrize("breakage", ["negative", "unknown_basis", "missing_step",
                                      "extra_field"])
def test_schema_rejects_broken_documents(full_store: Store, tmp_path: Path,
                                         breakage: str) -> None:
    doc = build_report(full_store, tmp_path).doc
    bad = copy.deepcopy(doc)
    if breakage == "negative":
        bad["ledger"][3]["count"] = -1
    elif breakage == "unknown_basis":
        bad["ledger"][6]["basis"] = "guessed"
    elif breakage == "missing_step":
        del bad["ledger"][2]
    else:
        bad["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_document(bad)


def test_not_run_report_is_valid_and_says_so(fleet_store: Store, tmp_path: Path) -> None:
    built = build_report(fleet_store, tmp_path)
    validate_document(built.doc)
    html = built.html_path.read_text()
    for text in ("certification not run", "lifecycle not run", "simulation not run"):
        assert text in html
    assert built.doc["certification"] == {"status": "not_run"}


def test_html_is_self_contained(full_store: Store, topo: Topology, tmp_path: Path) -> None:
    # text from the store is escaped, never markup: a hostile evidence string stays text
    full_store.append_event("us-east/r01/c01/gpu0", "certify.finding", {
        "component": "us-east/r01/c01/gpu0", "kind": "sdc", "stage": 1, "verdict": "fail",
        "confidence": 1.0, "run_id": "c-0001", "backend": "twin",
        "evidence": {"check": "<script>alert(1)</script>"}})
    html = build_report(full_store, tmp_path).html_path.read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script" not in html
    # every src/href is inline data or an in-page anchor: readable offline
    refs = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), refs
    assert html.count('src="data:image/png;base64,') >= 3  # waterfall, sweep, lost hours
    assert "<style>" in html and "@import" not in html
    # every ledger figure says what it rests on
    for basis in ("fleet spec", "inventory", "simulated (twin)"):
        assert basis in html
