"""The soak's fault schedule: drawn from the simulator's failure model, seeded, exactly the
count asked for, one fault at a time, and only what the lab can do for real."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from rackscale.simulate import Cause, failure_model
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


def test_cooling_is_a_lab_action_on_the_rack_drawn_at_its_ratio() -> None:
    s = draw(MODEL, count=8, gpus=4, duration_s=1200, seed=5, repair_s=20, settle_s=20,
             cooling_ratio=5.0)
    cooled = [f for f in s.faults if f.lab.action == "coolant_flow_low"]
    assert cooled and all(f.lab.part == "rack" and f.lab.severity == 0.5 for f in cooled)
    assert all(f.model_kind == "coolant_flow_low" for f in cooled)
    assert not any("cool" in k.lower() or "cdu" in k.lower() for k in s.left_out)
    # the rate counts cooling beside fail-stop and fail-slow: still `count` faults expected
    assert s.expected_unscaled * s.rate_scale == pytest.approx(8, rel=1e-3)
    only = draw(MODEL, count=3, gpus=4, duration_s=600, seed=1, repair_s=20, settle_s=20,
                cooling_ratio=0.1, kinds=("coolant_flow_low",))
    assert {f.lab.action for f in only.faults} == {"coolant_flow_low"}


def test_a_model_with_a_cooling_cause_draws_it_at_its_share() -> None:
    cdu = Cause(name="CDU pump", count=1, kind="coolant_flow_low", scope="domain",
                repair_h=4, detect_min=2)
    model = dataclasses.replace(MODEL, causes=(cdu,))
    s = draw(model, count=3, gpus=4, duration_s=600, seed=0, repair_s=20, settle_s=20,
             straggler_ratio=0.0)
    assert {(f.cause, f.lab.action, f.lab.part) for f in s.faults} == {
        ("CDU pump", "coolant_flow_low", "rack")}
    assert "coolant_flow_low" in LAB_ACTIONS


def test_without_a_cooling_ratio_the_draw_is_unchanged() -> None:
    # a weight of 0 adds nothing to the pool, so the seeded draw is the one it was before
    a = draw(MODEL, count=4, gpus=4, duration_s=1200, seed=3)
    b = draw(MODEL, count=4, gpus=4, duration_s=1200, seed=3, cooling_ratio=0.0)
    assert a == b and all(f.lab.action != "coolant_flow_low" for f in a.faults)
    with pytest.raises(ScheduleError, match="cooling-ratio"):
        draw(MODEL, count=1, gpus=4, duration_s=600, seed=0, cooling_ratio=-1)
