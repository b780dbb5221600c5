"""One truth about the fleet, end to end through the CLI on a mixed fleet: the sequences an
operator runs (certify, then lifecycle) and what every view must then say."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology
from rackscale.report import build_ledger, collect
from rackscale.server import ServerConfig, create_app
from rackscale.state import ConditionType, FleetState
from rackscale.store import Store, loaded_spec

runner = CliRunner()
MIXED = {"name": "mixed-5", "regions": [
    {"name": "eu-north", "racks": [{"template": "gb200-nvl72", "count": 2},
                                   {"template": "hgx-h100", "names": ["h100-a"]}]},
    {"name": "us-east", "racks": [{"template": "gb300-nvl72", "count": 1},
                                  {"template": "hgx-b200", "count": 1}]}]}


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    monkeypatch.chdir(tmp_path)
    spec = tmp_path / "mixed.yaml"
    spec.write_text(yaml.safe_dump(MIXED))
    db = f"sqlite:///{tmp_path / 'r.db'}"
    ok(["fleet", "load", "--fleet", str(spec), "--db", db])
    return db, tmp_path


def ok(args: list[str], codes: tuple[int, ...] = (0,)) -> str:
    res = runner.invoke(app, args)
    assert res.exit_code in codes, res.output
    return res.output


def faults(tmp: Path, *items: dict) -> str:
    path = tmp / f"faults-{len(list(tmp.glob('faults-*')))}.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "faults": list(items)}))
    return str(path)


def lifecycle(db: str, tmp: Path) -> str:
    return ok(["lifecycle", "run", "--goal", "production", "--until-idle", "--period", "0",
               "--passes", "400", "--db", db, "--plant", str(tmp / "plant.json")])


def states(db: str) -> dict[str, str]:
    from rackscale.lifecycle import open_store
    from rackscale.lifecycle.repository import LifecycleRow

    store = open_store(Store(db))
    with store.session() as s:
        return {r.component_id: r.state for r in s.query(LifecycleRow)}


def served_usable(db: str, store: Store) -> tuple[dict[str, float], dict[str, int]]:
    """Usable GPUs per rack as /metrics and /api/v1/racks give them."""
    client = TestClient(create_app(ServerConfig(db=db), store))
    metrics = {s.labels["rack"]: s.value
               for fam in text_string_to_metric_families(client.get("/metrics").text)
               for s in fam.samples if s.name == "rackscale_rack_usable_gpus"}
    api = {r["id"]: r["usable_gpus"] for r in client.get("/api/v1/racks").json()["items"]}
    return metrics, api


def test_a_newer_failed_certification_supersedes_the_older_pass(fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    ok(["certify", "run", "--db", db])
    bad = faults(tmp, {"target": "eu-north/r01/ps2", "kind": "power_shelf_down"},
                 {"target": "us-east/r01/s03", "kind": "nvlink_switch_degraded",
                  "severity": 0.5})
    ok(["certify", "run", "--faults", bad, "--db", db], codes=(1,))
    lifecycle(db, tmp)
    st = states(db)
    # Both racks with a rack-level finding in the newest run are out, not certified on the
    # older pass; every other rack serves.
    assert st["eu-north/r01"] == st["us-east/r01"] == "maintenance"
    assert st["eu-north/r02"] == st["eu-north/h100-a"] == st["us-east/r02"] == "production"
    hist = ok(["lifecycle", "history", "eu-north/r01", "--json", "--db", db])
    assert "certified" not in {e["payload"]["to"] for e in yaml.safe_load(hist)}
    # the API and /metrics show the same condition the gate read
    client = TestClient(create_app(ServerConfig(db=db), Store(db)))
    conds = {c["type"]: c for c in client.get("/api/v1/racks/eu-north/r01").json()["conditions"]}
    assert conds["Certified"]["status"] == "False"
    assert "power_shelf_down at eu-north/r01/ps2" in conds["Certified"]["message"]
    samples = {(s.labels["rack"], s.labels["type"]): s.value
               for fam in text_string_to_metric_families(client.get("/metrics").text)
               for s in fam.samples if s.name == "rackscale_rack_condition"}
    assert samples[("eu-north/r01", "Certified")] == 0.0
    assert samples[("eu-north/r02", "Certified")] == 1.0


def test_without_an_earlier_pass_failing_racks_do_not_wait_forever(
        fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    bad = faults(tmp, {"target": "eu-north/r01/ps2", "kind": "power_shelf_down"})
    ok(["certify", "run", "--faults", bad, "--db", db], codes=(1,))
    lifecycle(db, tmp)
    assert states(db)["eu-north/r01"] == "maintenance"  # pulled for repair, not stuck in burn_in


def test_healthy_hgx_racks_are_usable_in_every_view(fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    ok(["certify", "run", "--db", db])
    lifecycle(db, tmp)
    store = Store(db)
    ledger = build_ledger(collect(store))
    usable = {r["id"]: r["usable_gpus"] for r in ledger.racks}
    assert usable == {"eu-north/r01": 72, "eu-north/r02": 72, "eu-north/h100-a": 32,
                      "us-east/r01": 72, "us-east/r02": 32}
    assert ledger.shape.name == "whole-hgx-nodes + whole-nvl72-domains"
    assert served_usable(db, store) == (usable, usable)


def test_certify_and_lifecycle_read_one_plant(fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    low = faults(tmp, {"target": "eu-north/r01/cdu", "kind": "coolant_flow_low",
                       "severity": 0.55})
    ok(["certify", "run", "--faults", low, "--db", db], codes=(1,))
    out = lifecycle(db, tmp)  # no --faults: the twin's plant is the one certify recorded
    st = states(db)
    assert st["eu-north/r01"] == "cabled"  # the coolant interlock holds it before power
    assert "waiting eu-north/r01: cooling not verified: coolant flow" in out
    assert st["eu-north/r02"] == "production"


def test_a_repaired_degraded_rack_returns_through_lifecycle_run(
        fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    ok(["certify", "run", "--db", db])
    lifecycle(db, tmp)
    slow = faults(tmp, {"target": "eu-north/r02/c05/gpu1", "kind": "slow_gpu",
                        "severity": 0.7})
    ok(["certify", "run", "--faults", slow, "--db", db], codes=(1,))
    lifecycle(db, tmp)
    st = states(db)
    assert st["eu-north/r02/c05"] == "triage" and st["eu-north/r02"] == "degraded"
    ok(["certify", "run", "--db", db])  # repaired: the recertification passes
    lifecycle(db, tmp)
    st = states(db)
    assert st["eu-north/r02/c05"] == "production" and st["eu-north/r02"] == "production"


def test_the_state_read_incrementally_equals_one_read_from_scratch(
        fleet: tuple[str, Path]) -> None:
    db, tmp = fleet
    store = Store(db)
    spec = loaded_spec(store)
    assert spec is not None
    topo = Topology.build(spec)
    live = FleetState(topo)
    ok(["certify", "run", "--db", db])
    live.refresh(store)
    bad = faults(tmp, {"target": "eu-north/h100-a/n02/gpu3", "kind": "gpu_dead"},
                 {"target": "us-east/r01/cdu", "kind": "coolant_flow_low", "severity": 0.5})
    ok(["certify", "run", "--faults", bad, "--db", db], codes=(1,))
    lifecycle(db, tmp)
    live.refresh(store)
    fresh = FleetState.load(store, topo)
    parts = [r.id for r in topo.racks] + [topo.ids[i] for i in range(len(topo.ids))
                                         if topo.kinds[i] in ("compute_tray", "node")]
    assert [live.conditions(p) for p in parts] == [fresh.conditions(p) for p in parts]
    assert live.failing("eu-north/h100-a/n02") is not None
    assert fresh.gate("us-east/r01").evidence_seq is None
    cooling = fresh.condition("us-east/r01", ConditionType.COOLING)
    assert cooling is not None and not cooling.ok and "simulated" in cooling.message
    nominal = fresh.condition("eu-north/r01", ConditionType.COOLING)
    assert nominal is not None and nominal.ok


def test_a_scoped_recertification_leaves_every_other_rack_as_it_stood(
        fleet: tuple[str, Path]) -> None:
    """The day-2 sequence: a rack fails, is repaired and certified with `--scope` (every other
    part `not_run`). The repaired rack returns, and the racks the scoped run left out keep
    their usable GPUs in the report, the API and /metrics (they had counted 0: the report
    read only the newest run's results)."""
    db, tmp = fleet
    ok(["certify", "run", "--db", db])
    lifecycle(db, tmp)
    bad = faults(tmp, {"target": "eu-north/h100-a/n02/gpu3", "kind": "gpu_dead"})
    ok(["certify", "run", "--faults", bad, "--db", db], codes=(1,))
    lifecycle(db, tmp)
    assert states(db)["eu-north/h100-a/n02"] == "triage"
    ok(["certify", "run", "--scope", "eu-north/h100-a", "--db", db])  # repaired
    lifecycle(db, tmp)
    st = states(db)
    assert st["eu-north/h100-a/n02"] == "production" and st["eu-north/h100-a"] == "production"
    store = Store(db)
    ledger = build_ledger(collect(store))
    usable = {r["id"]: r["usable_gpus"] for r in ledger.racks}
    assert usable == {"eu-north/r01": 72, "eu-north/r02": 72, "eu-north/h100-a": 32,
                      "us-east/r01": 72, "us-east/r02": 32}
    assert ledger.findings == []  # the repaired GPU's finding is superseded by the scoped pass
    assert served_usable(db, store) == (usable, usable)
