"""The simulator's prediction of a soak: its engine fed the soak's rates, shape and measured
costs (a real soak's result, `data/soak1/`, a 4-minute soak of 3 faults on the lab)."""

from __future__ import annotations

import copy
import dataclasses
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.errors import UserError
from rackscale.soak import PredictError, differing, from_dict, prediction, verdict
from rackscale.soak.predict import predict
from rackscale.soak.schedule import Schedule
from rackscale.store import RecoverySoakV1

DATA = Path(__file__).parent / "data" / "soak1"
RESULT: dict[str, Any] = json.loads((DATA / "soak.json").read_text(encoding="utf-8"))
SCHEDULE = from_dict(json.loads((DATA / "schedule.json").read_text(encoding="utf-8")))
EVERY = 10  # the soak ran with `job soak`'s default --ckpt-every
RESTART = ("stop", "localization", "restart", "restore")


def test_a_real_soak_gets_a_simulated_ettr_with_its_spread() -> None:
    p = predict(RESULT, SCHEDULE, ckpt_every=EVERY)
    assert p["simulated"] is True and "simulated" in p["basis"]
    assert 0 < p["ettr"] <= 1
    assert 0 <= p["ettr_lo"] <= p["ettr"] <= p["ettr_hi"] <= 1
    assert p["ettr_ci95"] > 0
    v = verdict(RESULT, p)
    assert v["measured"] == RESULT["ettr"]["value"]
    assert v["difference_pp"] == pytest.approx((p["ettr"] - v["measured"]) * 100, abs=0.01)
    assert v["inside"] == (v["lo"] <= p["ettr"] <= v["hi"])


def test_the_figures_fed_are_echoed_with_where_they_came_from() -> None:
    inp = predict(RESULT, SCHEDULE, ckpt_every=EVERY)["inputs"]
    assert inp["rate_scale"]["value"] == SCHEDULE.rate_scale
    assert inp["failure_model"]["value"] == SCHEDULE.failure_model
    assert inp["job_gpus"]["value"] == 4 and inp["spare_domains"]["value"] == 4
    assert inp["days"]["value"] * 86400 == pytest.approx(RESULT["window_s"])
    assert inp["ckpt_interval_min"]["value"] == pytest.approx(
        EVERY * RESULT["clean_step_s"] / 60)
    assert inp["straggler_ratio"]["value"] == pytest.approx(0.1)  # the schedule's default
    restart = statistics.fmean(sum(f["badput_s"][k] for k in RESTART)
                               for f in RESULT["faults"])
    assert inp["restart_min"]["value"] * 60 == pytest.approx(restart, abs=1e-3)
    assert inp["restart_min"]["basis"] == "measured"
    assert inp["start_min"]["value"] * 60 == pytest.approx(RESULT["badput_s"]["initial_start"],
                                                           abs=1e-3)


def test_a_cost_the_soak_did_not_measure_is_the_simulators_assumption() -> None:
    r = copy.deepcopy(RESULT)
    for f in r["faults"]:  # only slow faults, none detected: no detection measured at all
        f["named"]["symptom"] = "straggler"
        f["detected"], f["time_to_detect_s"] = False, None
    inp = predict(r, SCHEDULE, ckpt_every=EVERY)["inputs"]
    assert inp["detect_min"]["basis"].startswith("assumed")


def test_a_soak_without_fail_stop_feeds_the_detection_it_measured() -> None:
    """A network-only soak injects slow faults the simulator counts as fail-stop: the
    detection fed is the soak's own (it fell back to the simulator's 191 s against 2.6 s
    measured, and missed by 34 pp)."""
    r = copy.deepcopy(RESULT)
    for i, f in enumerate(r["faults"]):
        f["named"]["symptom"] = "straggler"
        f["detected"], f["time_to_detect_s"] = True, 2.0 + i
    inp = predict(r, SCHEDULE, ckpt_every=EVERY)["inputs"]["detect_min"]
    assert inp["basis"] == "measured" and "time to detect" in inp["from"]
    assert inp["value"] * 60 == pytest.approx(statistics.fmean(
        2.0 + i for i in range(len(r["faults"]))), abs=1e-3)


def _soak(faults: int, cost: float) -> tuple[dict[str, Any], Schedule]:
    """The fixture soak with `faults` faults expected (the rates scaled with it) and every
    restart's measured cost multiplied by `cost`."""
    r = copy.deepcopy(RESULT)
    r["schedule"]["faults"] = faults
    for f in r["faults"]:
        f["badput_s"] = {k: v * cost if k in RESTART else v for k, v in f["badput_s"].items()}
    s = dataclasses.replace(SCHEDULE, count=faults,
                            rate_scale=SCHEDULE.rate_scale * faults / SCHEDULE.count)
    return r, s


@settings(max_examples=12, deadline=None)
@given(faults=st.integers(1, 6), more=st.integers(2, 4), cost=st.floats(0.5, 2.0))
def test_more_faults_or_dearer_recoveries_predict_a_lower_ettr(faults: int, more: int,
                                                                cost: float) -> None:
    base = predict(*_soak(faults, cost), ckpt_every=EVERY, trials=500)["ettr"]
    assert predict(*_soak(faults * more, cost), ckpt_every=EVERY, trials=500)["ettr"] < base
    assert predict(*_soak(faults, cost * 2), ckpt_every=EVERY, trials=500)["ettr"] < base


def test_a_result_and_a_schedule_of_different_soaks_are_refused_saying_what_to_give() -> None:
    other = dataclasses.replace(SCHEDULE, gpus=8)
    with pytest.raises(PredictError, match=r"give the schedule\.json written beside") as err:
        predict(RESULT, other, ckpt_every=EVERY)
    assert isinstance(err.value, UserError)
    with pytest.raises(PredictError, match="not a soak result: no window_s"):
        predict({k: v for k, v in RESULT.items() if k != "window_s"}, SCHEDULE,
                ckpt_every=EVERY)
    bad = copy.deepcopy(RESULT) | {"window_s": 0}
    with pytest.raises(PredictError, match="must be positive"):
        predict(bad, SCHEDULE, ckpt_every=EVERY)


def test_the_checkpoint_interval_comes_from_the_result_or_must_be_given() -> None:
    with pytest.raises(PredictError, match="give ckpt_every"):
        predict(RESULT, SCHEDULE)
    r = copy.deepcopy(RESULT)
    r["job"]["ckpt_every"] = EVERY
    assert predict(r, SCHEDULE) == predict(RESULT, SCHEDULE, ckpt_every=EVERY)
    # the soak keeps its measured result whatever the prediction does
    why = prediction(RESULT, SCHEDULE)
    assert why["ettr"] is None and "ckpt_every" in why["why"]
    assert verdict(RESULT, why)["predicted"] is None and differing(RESULT, why) == []


def test_the_prediction_fits_the_stored_soak_event() -> None:
    r = copy.deepcopy(RESULT)
    r["job"]["ckpt_every"] = EVERY
    p = prediction(r, SCHEDULE)
    ev = RecoverySoakV1(job="job-1", host="h", lab="l", schedule=r["schedule"],
                        window_s=r["window_s"], clean_step_s=r["clean_step_s"],
                        ettr=r["ettr"], goodput=r["goodput"], badput_s=r["badput_s"],
                        predicted=p)
    assert ev.predicted is not None and ev.predicted["simulated"] is True


def test_a_miss_names_the_assumption_whose_badput_parts() -> None:
    r = copy.deepcopy(RESULT)
    r["badput_s"]["lost_work"] += 0.2 * r["window_s"]  # the lab lost far more work
    lines = differing(r, predict(r, SCHEDULE, ckpt_every=EVERY))
    assert lines and lines[0].startswith("lost_work:")
    assert "checkpoint interval" in lines[0]
