"""Bad commands get a clear error, exit code 2, and change nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.lifecycle import SimPlant
from rackscale.store import Store

runner = CliRunner()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    plant = str(tmp_path / "plant.json")
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    res = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant])
    assert res.exit_code == 0, res.output
    return db, plant


def _snapshot(db: str) -> tuple[int, list[tuple[str, str]]]:
    from sqlalchemy import select

    from rackscale.lifecycle import LifecycleRow

    store = Store(db)
    with store.session() as s:
        rows = [(r.component_id, r.state) for r in s.scalars(select(LifecycleRow))]
    return store.count_events(), sorted(rows)


@pytest.mark.parametrize("args,needle", [
    (["advance", "us-east/r99", "--to", "cabled", "--reason", "x"], "unknown lifecycle"),
    (["advance", "us-east/r01", "--to", "production", "--reason", "x"], "illegal transition"),
    (["advance", "us-east/r01", "--to", "flying", "--reason", "x"], "valid rack states"),
    (["advance", "us-east/r01/c03", "--to", "production", "--reason", "x"], "legal targets"),
    (["drain", "nowhere/r01", "--reason", "x"], "unknown lifecycle"),
    (["history", "us-east/r01/c99"], "unknown lifecycle"),
    (["status", "--rack", "us-west/r77"], "unknown lifecycle"),
])
def test_bad_commands_exit_2_and_change_nothing(env: tuple[str, str], args: list[str],
                                                needle: str) -> None:
    db, plant = env
    before = _snapshot(db)
    extra = ["--plant", plant] if args[0] == "advance" else []
    res = runner.invoke(app, ["lifecycle", *args, "--db", db, *extra])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert _snapshot(db) == before


def test_power_on_without_flow_is_refused(env: tuple[str, str]) -> None:
    db, plant_path = env
    for to in ("cabled",):
        res = runner.invoke(app, ["lifecycle", "advance", "us-east/r02", "--to", to, "--reason",
                                  "cabled", "--db", db, "--plant", plant_path])
        assert res.exit_code == 0, res.output
    plant = SimPlant.load(Path(plant_path))
    plant.set_flow("us-east/r02", 100.0)  # needs 272 L/min for 190 kW
    before = _snapshot(db)
    for to in ("cooling_verified", "powered"):
        res = runner.invoke(app, ["lifecycle", "advance", "us-east/r02", "--to", to,
                                  "--reason", "try", "--db", db, "--plant", plant_path])
        assert res.exit_code == 2, res.output
        assert "coolant interlock" in res.output and "100 L/min < required 272" in res.output
    assert _snapshot(db) == before
    assert not any(v for k, v in SimPlant.load(Path(plant_path)).power.items()
                   if k.startswith("us-east/r02/"))


def test_good_path_and_history(env: tuple[str, str]) -> None:
    db, plant = env
    for to in ("cabled", "cooling_verified", "powered", "firmware"):
        res = runner.invoke(app, ["lifecycle", "advance", "us-west/r01", "--to", to,
                                  "--reason", f"bring-up {to}", "--db", db, "--plant", plant])
        assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["lifecycle", "history", "us-west/r01", "--json", "--db", db])
    tos = [e["payload"]["to"] for e in __import__("json").loads(res.output)]
    assert tos == ["received", "cabled", "cooling_verified", "powered", "firmware"]
    res = runner.invoke(app, ["lifecycle", "status", "--json", "--db", db])
    assert '"firmware": 1' in res.output
    res = runner.invoke(app, ["lifecycle", "drain", "us-west/r01/c02", "--reason", "xid 79",
                              "--db", db])
    assert res.exit_code == 0 and "triage" in res.output


def test_power_on_that_cannot_finish_leaves_no_goal_behind(tmp_path: Path) -> None:
    """`advance --to powered` refused by the region budget exits 2, restores the rack's goal
    and leaves its shelves off, so a later `lifecycle run` does not power it up unasked."""
    from lc_rig import small_spec

    from rackscale.fleet import Topology
    from rackscale.lifecycle import state_of
    from rackscale.store import load_topology

    db, plant = f"sqlite:///{tmp_path / 'b.db'}", str(tmp_path / "plant.json")
    load_topology(Store(db), Topology.build(small_spec(budget_kw=200.0)))  # one rack fits
    assert runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant",
                               plant]).exit_code == 0
    for rid in ("a/r01", "a/r02"):
        for to in ("cabled", "cooling_verified", "powered"):
            res = runner.invoke(app, ["lifecycle", "advance", rid, "--to", to, "--reason",
                                      "bring-up", "--db", db, "--plant", plant])
            if rid == "a/r01" or to != "powered":
                assert res.exit_code == 0, res.output
    assert res.exit_code == 2 and "power budget" in res.output, res.output
    row = state_of(Store(db), "a/r02")
    assert row.state == "cooling_verified" and row.goal is None
    assert not any(v for k, v in SimPlant.load(Path(plant)).power.items()
                   if k.startswith("a/r02/"))
    res = runner.invoke(app, ["lifecycle", "run", "--passes", "3", "--period", "0", "--db", db,
                              "--plant", plant])
    assert res.exit_code == 0 and state_of(Store(db), "a/r02").state == "cooling_verified"


def test_run_moves_new_certify_findings_into_triage(env: tuple[str, str]) -> None:
    """Outside the demo too: a finding certify records reaches triage on the next
    `lifecycle run`, once (the cursor), and is not applied again."""
    from rackscale.lifecycle import state_of

    db, plant = env
    store = Store(db)
    store.append_event("us-east/r01/c03/gpu1", "certify.finding", {
        "component": "us-east/r01/c03/gpu1", "kind": "slow_gpu", "stage": 1,
        "evidence": {"simulated": True}, "confidence": 0.9, "run_id": "r1",
        "backend": "twin", "verdict": "fail"}, actor="certify")
    res = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant])
    assert res.exit_code == 0, res.output
    assert "triage: 1 new certify findings -> 1 trays to triage" in res.output
    assert state_of(store, "us-east/r01/c03").state == "triage"
    n = store.count_events()
    res = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant])
    assert res.exit_code == 0 and "certify findings" not in res.output
    assert store.count_events() == n


def test_the_one_drain_rule_takes_a_tray_to_triage_and_records_why(env: tuple[str, str]) -> None:
    """`lifecycle drain` and the server's drain both call lifecycle.drain: a tray goes to
    triage (a rack to draining), with the actor and the reason (trimmed) in its history."""
    from rackscale.lifecycle import UnknownLifecycleComponent, drain, history

    store = Store(env[0])
    t = drain(store, "us-west/r01/c03", actor="server", reason="  xid 48 ")
    assert (t.src, t.dst) == ("onboard", "triage")
    last = history(store, "us-west/r01/c03")[-1]
    assert last["actor"] == "server" and last["reason"] == "xid 48"
    with pytest.raises(UnknownLifecycleComponent):
        drain(store, "nowhere/r01", actor="server", reason="x")
