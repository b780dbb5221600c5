"""A run's result is a typed `SimResult`: it goes into the store's simulate.run event whole and
reads back as the same result; a bad one is refused with the field named."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.simulate import (
    FleetShape,
    SimResult,
    SweepResult,
    make_config,
    run,
    sweep,
    sweep_payload,
)
from rackscale.store import InvalidPayload, SimulateRunV1, SimulateSweepV1, Store


def _same(a: object, b: object) -> bool:
    """Equal, NaN equal to NaN (a one-trial CI, a Young/Daly interval without cost)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31), trials=st.integers(1, 4), days=st.floats(0.5, 3),
       interval=st.floats(5, 120), cost=st.floats(0, 300), recovery=st.booleans())
def test_result_round_trips_through_the_store(seed504: FleetShape, tmp_path_factory, seed: int,
                                              trials: int, days: float, interval: float,
                                              cost: float, recovery: bool) -> None:
    cfg = make_config(job_gpus=432, days=days, trials=trials, seed=seed,
                      ckpt_interval_min=interval, ckpt_cost_s=cost)
    result = run(cfg, seed504)
    if recovery:
        result = result.with_(recovery={"basis": "assumed", "restart_min": 5.0,
                                        "detect_min": None})
    store = Store(f"sqlite:///{tmp_path_factory.mktemp('rt')}/rt.db")
    try:
        store.append_event(result.fleet, "simulate.run", result.payload(), actor="test",
                           reason="round trip")
        (event,) = store.events(kind="simulate.run")
    finally:
        store.close()
    back = SimResult.model_validate(event.payload)
    assert _same(back.model_dump(), result.model_dump())
    assert ("recovery" in event.payload) is recovery
    assert "storage" not in event.payload  # only a run that used --storage carries it
    stored = event.parsed()  # what the report reads: the contract's model, the same figures
    assert isinstance(stored, SimulateRunV1)
    assert (stored.ettr.mean, stored.job_gpus, stored.fleet_gpus) == (
        result.ettr.mean, 432, 504)


def test_a_bad_result_is_refused_with_the_field_named(seed504: FleetShape, tmp_path) -> None:
    result = run(make_config(job_gpus=144, days=1, trials=2, seed=3), seed504)
    with pytest.raises(ValidationError, match=r"ettr\.mean"):
        result.with_(ettr={"mean": "most", "ci95": 0.1})
    with pytest.raises(ValidationError, match="units_job"):
        SimResult.model_validate({k: v for k, v in result.payload().items() if k != "units_job"})
    with pytest.raises(ValidationError, match="ettr_typo"):
        result.with_(ettr_typo=0.9)  # a key the result does not name
    with pytest.raises(ValidationError, match="align"):
        result.with_(align="rack")
    store = Store(f"sqlite:///{tmp_path}/bad.db")
    try:
        bad = {k: v for k, v in result.payload().items() if k != "ettr"}
        with pytest.raises(InvalidPayload, match=r"simulate\.run.*ettr"):
            store.append_event(result.fleet, "simulate.run", bad, actor="test", reason="bad")
        assert store.count_events("simulate.run") == 0
    finally:
        store.close()


def test_json_output_has_the_result_fields(tmp_path) -> None:
    res = CliRunner().invoke(app, ["simulate", "run", "--fleet", "seed-504", "--days", "1",
                                   "--trials", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # Every field of the result (recovery: what the run used; storage only with --storage).
    assert set(out) == set(SimResult.model_fields) - {"storage"}
    assert out["simulated"] is True and out["recovery"]["basis"] == "assumed"


def test_a_sweep_is_typed_and_its_event_fits_the_contract(seed504: FleetShape,
                                                          tmp_path) -> None:
    cfg = make_config(job_gpus=432, days=2, trials=3, seed=5)
    s = sweep(cfg, seed504, "ckpt-interval", [10, 30, 90])
    assert isinstance(s, SweepResult) and [p.value for p in s.points] == [10, 30, 90]
    assert s.optimum.value in (10, 30, 90)
    best = max(s.points, key=lambda p: p.ettr.mean)
    assert (s.optimum.ettr, s.daly_min) == (best.ettr, best.daly_min)
    out = s.as_dict()
    assert set(out) == {"simulated", "note", "param", "field", "values", "points", "optimum",
                        "young_min", "daly_min"}
    assert ("fitted_min" in out["optimum"]) is (s.optimum.fitted_min is not None)
    assert set(out["points"][0]) == set(SimResult.model_fields) - {"storage", "recovery"} | {
        "value"}
    store = Store(f"sqlite:///{tmp_path}/sweep.db")
    try:
        store.append_event("seed-504", "simulate.sweep", sweep_payload(
            s, fleet="seed-504", job_gpus=432, days=2, trials=3, seed=5), reason="test")
        (event,) = store.events(kind="simulate.sweep")
    finally:
        store.close()
    stored = event.parsed()
    assert isinstance(stored, SimulateSweepV1)
    assert [p.ettr.mean for p in stored.points] == [p.ettr.mean for p in s.points]
    with pytest.raises(ValidationError, match="optimum"):
        SweepResult.model_validate(s.model_dump() | {"optimum": {"value": 10}})
