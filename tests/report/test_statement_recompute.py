"""Recomputation: the ledger and every figure of report.json, rebuilt from the evidence bundle
alone (the store deleted) by the same ledger code, equal what the report says; for the seed
fleet, a mixed fleet, a fleet with faults, and the demo's real rooms."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from rackscale.fleet import Topology, seed_fleet
from rackscale.report import JobShape
from rackscale.report.bundle import read_evidence, view_from_evidence
from rackscale.report.cost import HOURS_PER_MONTH, PriceError, check_price
from rackscale.report.disclosure import disclosure_schema, validate_disclosure
from rackscale.report.statement import ledger_difference, recompute
from rackscale.report.verify import verify_bundle

from .bundles import Bundle, make_bundle, mixed_fleet
from .events import SEED_FAULTS

MIXED_FAULTS = [
    {"component": "eu-north/row-b/c04/gpu1", "kind": "slow_gpu", "verdict": "fail", "stage": 1,
     "evidence": {"tflops": 30.0}, "confidence": 0.9},
    {"component": "eu-north/r01/n02", "kind": "gpu_dead", "verdict": "fail", "stage": 1,
     "evidence": {}, "confidence": 0.99},
    {"component": "eu/r02/s03", "kind": "nvlink_switch_down", "verdict": "fail", "stage": 3,
     "evidence": {}, "confidence": 0.99},
]


def recomputed_of(b: Bundle) -> tuple[dict, dict]:
    evidence = read_evidence(b.dir)
    assert not evidence.problems
    return recompute(evidence.files, b.doc["generated_at"])


def check_equal(b: Bundle) -> dict:
    doc, disclosure = recomputed_of(b)
    reported = json.loads((b.dir / "report.json").read_text())
    assert ledger_difference(reported, doc) is None
    assert {s["key"]: s["count"] for s in doc["ledger"]} == b.counts
    assert disclosure == json.loads((b.dir / "disclosure.json").read_text())
    validate_disclosure(disclosure)
    result = verify_bundle(b.dir, b.pub)
    assert result.ok, result.first_problem
    return doc


def test_seed_fleet_recomputes(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, faults=[])
    doc = check_equal(b)
    assert doc["ledger"][-2]["count"] == 504  # nothing lost but to goodput
    assert not list(tmp_path.glob("*.db"))  # the store is gone


def test_a_fleet_with_faults_recomputes(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, faults=SEED_FAULTS, extra_lifecycle=True, price=3.0)
    doc = check_equal(b)
    steps = {s["key"]: s for s in doc["ledger"]}
    assert steps["healthy"]["lost"]["finding:slow_gpu"] == 1
    assert any(k.startswith("rack_state:maintenance") for k in steps["powered"]["lost"])
    assert steps["healthy"]["count"] < steps["powered"]["count"] < 504


def test_a_mixed_fleet_recomputes_for_two_job_shapes(tmp_path: Path) -> None:
    for n, shape in enumerate((None, JobShape(name="domains-of-8", gpus_per_domain=8))):
        b = make_bundle(tmp_path, mixed_fleet(), name=f"r{n}", faults=MIXED_FAULTS,
                        shape=shape)
        doc = check_equal(b)
        # the default: each rack by its own whole domain (72 on NVL72, 8 on an HGX node)
        assert doc["job_shape"]["gpus_per_domain"] == (None if shape is None else 8)
        if shape is None:
            assert doc["job_shape"]["name"] == "whole-hgx-nodes + whole-nvl72-domains"
        assert doc["fleet"]["per_rack_template"].keys() >= {"gb200-nvl72", "hgx-h100"}


def test_the_bundle_rebuilds_the_store_view(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, faults=SEED_FAULTS, sign=False)
    view, params = view_from_evidence(read_evidence(b.dir).files)
    assert view.topo.ids == Topology.build(seed_fleet("seed-504")).ids
    assert len(view.findings) == len(SEED_FAULTS) and view.certify_run is not None
    assert params["job_shape"]["name"] == "whole-nvl72-domains"
    assert view.simulate_run.payload["job_mtbf_model_h"] == float("inf")  # tagged, not lost


def test_cost_per_lost_step(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, faults=SEED_FAULTS, price=2.0, sign=False)
    cost = b.doc["cost"]
    rows = {r["step"]: r for r in cost["steps"]}
    lost = b.counts["powered"] - b.counts["healthy"]
    assert rows["healthy"]["per_month"] == pytest.approx(lost * 2.0 * HOURS_PER_MONTH)
    assert rows["healthy"]["by_reason"]["finding:slow_gpu"] == 2.0 * HOURS_PER_MONTH
    total = (b.counts["headline"] - b.counts["goodput"]) * 2.0 * HOURS_PER_MONTH
    assert cost["total_per_month"] == pytest.approx(total, abs=0.05)
    assert "cost" in (b.dir / "report.html").read_text()
    with pytest.raises(PriceError):
        check_price(-1.0)


def test_the_disclosure_covers_what_a_buyer_asks(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, faults=SEED_FAULTS, sign=False, price=1.0)
    d = json.loads((b.dir / "disclosure.json").read_text())
    validate_disclosure(d)
    assert d["evidence_root"] == b.doc["evidence"]["root"]
    assert d["headline"]["gpus"] == 504 and d["ledger"][0]["step"] == "headline"
    healthy = next(x for x in d["ledger"] if x["step"] == "healthy")
    assert healthy["provenance"] == {"basis": "simulated", "seed": 7,
                                     "model": "digital twin with faults file faults/seed.yaml"}
    assert {x["reason"] for x in healthy["lost"]} >= {"finding:slow_gpu"}
    assert all(x["why"] for x in healthy["lost"])
    assert d["recovery"]["simulated"]["provenance"]["basis"] == "simulated"
    # a figure without provenance does not validate
    broken = json.loads(json.dumps(d))
    del broken["ledger"][0]["provenance"]
    with pytest.raises(jsonschema.ValidationError):
        validate_disclosure(broken)
    broken = json.loads(json.dumps(d))
    broken["ledger"][3]["provenance"] = {"basis": "measured"}  # measured: where? on what?
    with pytest.raises(jsonschema.ValidationError):
        validate_disclosure(broken)
    assert disclosure_schema()["properties"]["schema_version"]["const"] == d["schema_version"]


@pytest.mark.timeout(300)
def test_the_demo_report_is_signed_and_verifies(tmp_path: Path) -> None:
    """The demo's own steps on the real rooms: the report step signs with the demo key and
    verifies; the page shows the bundle hash and the status."""
    from rackscale.cli import certify as certify_cli
    from rackscale.cli import checkpoint as checkpoint_cli
    from rackscale.cli import lifecycle as lifecycle_cli
    from rackscale.cli import simulate as simulate_cli
    from rackscale.cli.demo import DemoContext
    from rackscale.cli.report import step_report
    from rackscale.store import Store, load_topology

    store = Store(f"sqlite:///{tmp_path}/rackscale.db")
    topo = Topology.build(seed_fleet("seed-504"))
    load_topology(store, topo)
    ctx = DemoContext(topo=topo, store=store, seed=7, data_dir=tmp_path)
    try:
        for step in (lifecycle_cli.step_onboarding, certify_cli.step_certify,
                     lifecycle_cli.step_triage, checkpoint_cli.step_checkpoint,
                     simulate_cli.step_simulate, step_report):
            step(ctx)
    finally:
        store.close()
    rep = ctx.results.report
    assert rep is not None and rep.verified is True
    out = tmp_path / "report"
    html = (out / "report.html").read_text()
    assert rep.evidence_root in html and ">verified</b>" in html
    key = tmp_path / "keys" / "demo-signing.pem"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    d = json.loads((out / "disclosure.json").read_text())
    assert d["storage"]["status"] == "measured" and d["storage"]["tiers"]
    assert d["performance"]["status"] == "ran" and d["performance"]["scopes"]
    scope = d["performance"]["scopes"][0]
    assert scope["nvlink_on"]["busbw_gbps"] > scope["nvlink_off"]["busbw_gbps"] > 0
    assert verify_bundle(out, key.with_name("demo-signing.pem.pub")).ok
