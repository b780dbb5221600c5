"""The soak's fault schedule: drawn from the simulator's failure model, seeded, exactly the
count asked for, one fault at a time, and only what the lab can do for real."""

from __future__ import annotations

import itertools

import pytest

from rackscale.simulate import failure_model
from rackscale.soak import LAB_ACTIONS, ScheduleError, draw

MODEL = failure_model("llama3")


def test_the_same_seed_draws_the_same_schedule_and_another_seed_another() -> None:
    a = draw(MODEL, count=4, gpus=4, duration_s=1200, seed=3)
    assert a == draw(MODEL, count=4, gpus=4, duration_s=1200, seed=3)
    assert a.faults != draw(MODEL, count=4, gpus=4, duration_s=1200, seed=4).faults


def test_rates_are_scaled_to_the_count_and_faults_never_overlap() -> None:
    s = draw(MODEL, count=5, gpus=4, duration_s=1200, seed=1, repair_s=30, settle_s=40)
    assert len(s.faults) == 5
    # the model's rate times the scale expects exactly `count` faults over the soak
    assert s.expected_unscaled * s.rate_scale == pytest.approx(5, rel=1e-3)
    ats = [f.at_s for f in s.faults]
    assert ats[0] >= s.warmup_s and ats[-1] + 30 <= 1200 - 60
    assert all(b - a >= 30 + 40 for a, b in itertools.pairwise(ats))
    assert all(f.repair_s == 30 and f.model_repair_s < 30 for f in s.faults)
    assert all(0 <= f.rank < 4 for f in s.faults)


def test_causes_without_a_lab_counterpart_are_left_out_and_said() -> None:
    s = draw(MODEL, count=40, gpus=4, duration_s=40 * 60 + 120, seed=0, repair_s=1,
             settle_s=59)
    assert {f.model_kind for f in s.faults} <= set(LAB_ACTIONS) | {"slow_gpu"}
    assert "silent data corruption" in s.left_out and "power supply" in s.left_out
    d = s.to_dict()
    assert d["faults"][0]["lab"]["action"] and d["basis"].startswith("drawn from")


def test_kinds_restrict_the_draw() -> None:
    s = draw(MODEL, count=6, gpus=4, duration_s=600, seed=2, repair_s=20, settle_s=20,
             kinds=("bad_cable",))
    assert {f.lab.action for f in s.faults} <= {"bad_cable", "flapping", "leaf_degraded"}
    with pytest.raises(ScheduleError, match="no cause"):
        draw(MODEL, count=1, gpus=4, duration_s=600, seed=0, kinds=("sdc",))


def test_a_soak_too_short_for_its_faults_is_refused_with_the_duration_it_needs() -> None:
    with pytest.raises(ScheduleError, match="at least"):
        draw(MODEL, count=10, gpus=4, duration_s=240, seed=0)
