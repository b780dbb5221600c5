"""The simulator takes the measured restart cost of supervised jobs' incidents (a `rackscale
job incidents --json` file, or the store) instead of its assumed restart and detection, and
says which it used; a larger measured cost lowers ETTR."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.simulate.test_storage import profile_dict
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology, seed_fleet
from rackscale.recovery.record import Recorder
from rackscale.simulate import FleetShape, make_config, run
from rackscale.simulate.recovery import measured_recovery, with_recovery
from rackscale.store import RecoveryIncidentV1 as IncidentPayload
from rackscale.store import Store, load_topology

runner = CliRunner()
SIM = ["simulate", "run", "--fleet", "seed-504", "--job-gpus", "288", "--days", "10",
       "--trials", "20", "--seed", "3", "--json"]


def incident(detect_s: float, downtime_s: float | None, **kw: object) -> IncidentPayload:
    base: dict[str, object] = dict(
        job="j1", attempt=0, symptom="fail_stop", rank=1, component="us-east/r01/c01/gpu0",
        fault_kind="gpu_dead", spare="us-east/r01/c02/gpu0", detected_at=1.7e9,
        detect_s=detect_s, localize_s=0.01, stop_s=0.2, restart_s=0.5, restore_s=0.5,
        first_step_s=1.0, downtime_s=downtime_s, ckpt_id="ck-1", ckpt_step=10,
        work_lost_steps=2, step_s=0.1, host="node-a")
    return IncidentPayload.model_validate(base | kw)


def store_with(tmp: Path, *incs: IncidentPayload) -> Store:
    store = Store(f"sqlite:///{tmp}/rackscale.db")
    load_topology(store, Topology.build(seed_fleet("seed-504")), actor="test", reason="test")
    rec = Recorder(tmp, store)
    for inc in incs:
        rec.incident(inc)
    return store


def incidents_file(tmp: Path, store: Store) -> Path:
    res = runner.invoke(app, ["job", "incidents", "--db", store.url, "--json"])
    assert res.exit_code == 0, res.output
    path = tmp / "incidents.json"
    path.write_text(res.stdout)
    return path


def sim(*args: str) -> dict:
    res = runner.invoke(app, [*SIM, *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_the_measured_restart_cost_replaces_the_assumption_and_lowers_ettr(
        tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    (tmp_path / "slow").mkdir()
    # Medians: fast (2+10, 1+5, 3+40) -> 12 s; slow: 600 + 3000 s -> 3600 s. The unfinished
    # restart (no downtime, no restart) is left out of the median.
    fast = store_with(tmp_path / "fast", incident(2, 10), incident(1, 5), incident(3, 40),
                      incident(9, None, restart_s=None, outcome="no_spare"))
    slow = store_with(tmp_path / "slow", incident(600, 3000))
    try:
        fast_run = sim("--recovery", str(incidents_file(tmp_path / "fast", fast)))
        slow_run = sim("--recovery-from-store", "--db", slow.url)
    finally:
        fast.close()
        slow.close()
    assumed = sim()
    assert fast_run["recovery"]["basis"] == "measured"
    assert fast_run["recovery"]["incidents"] == 3
    assert fast_run["recovery"]["restart_cost_s"] == 12.0
    assert fast_run["recovery"]["detect_min"] == 0.0
    assert slow_run["recovery"]["restart_cost_s"] == 3600.0
    assert slow_run["recovery"]["source"].startswith("store ")
    assert assumed["recovery"] == {"basis": "assumed", "restart_min": 5.0, "detect_min": None}
    assert slow_run["ettr"]["mean"] < assumed["ettr"]["mean"] < fast_run["ettr"]["mean"]


def test_the_table_says_which_restart_cost_it_used(tmp_path: Path) -> None:
    store = store_with(tmp_path, incident(2, 10))
    try:
        res = runner.invoke(app, [*SIM[:-1], "--recovery-from-store", "--db", store.url])
    finally:
        store.close()
    assert res.exit_code == 0, res.output
    assert "restart cost measured: 12.00 s" in res.output and "1 incidents" in res.output
    res = runner.invoke(app, SIM[:-1])
    assert "restart cost assumed: 5 min" in res.output


def test_bad_recovery_input_is_exit_2_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    res = runner.invoke(app, [*SIM, "--recovery", str(bad)])
    assert res.exit_code == 2 and "bad.json" in res.output and "incidents" in res.output
    empty = tmp_path / "empty.json"
    empty.write_text('{"incidents": [], "measured": true}')
    res = runner.invoke(app, [*SIM, "--recovery", str(empty)])
    assert res.exit_code == 2 and "no completed recovery" in res.output
    res = runner.invoke(app, [*SIM, "--recovery", str(empty), "--recovery-from-store"])
    assert res.exit_code == 2 and "give one of them" in res.output
    assert "Traceback" not in res.output


def test_measured_restart_does_not_combine_with_storage(tmp_path: Path) -> None:
    good = tmp_path / "incidents.json"
    good.write_text(json.dumps({"incidents": [incident(2, 10).model_dump()]}))
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps(profile_dict()))
    res = runner.invoke(app, [*SIM, "--recovery", str(good), "--storage", str(prof)])
    assert res.exit_code == 2 and "already includes the checkpoint restore" in res.output


@settings(max_examples=8, deadline=None)
@given(a=st.floats(0, 3600), b=st.floats(0, 3600))
def test_a_larger_measured_restart_cost_never_raises_ettr(a: float, b: float) -> None:
    shape = FleetShape.from_spec(seed_fleet("seed-504"))
    cfg = make_config(job_gpus=288, days=5, trials=10, seed=1)
    ettr = {}
    for cost in (a, b):
        m = measured_recovery([{"detect_s": 0.0, "downtime_s": cost}], "test")
        ettr[cost] = run(with_recovery(cfg, m)[0], shape).ettr.mean
    lo, hi = sorted((a, b))
    assert ettr[hi] <= ettr[lo] + 1e-12
