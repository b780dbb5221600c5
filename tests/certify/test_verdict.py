"""Verdicts (certify/verdict.py): the lines a measurement is judged against, and the evidence.

Figures are chosen so every line falls on a value exact in binary (0.75, 0.875, 0.5): a
measurement sitting exactly on a line shows which side of it counts.
"""

from __future__ import annotations

import numpy as np
import pytest

from rackscale.certify.verdict import (
    MAD_TO_SIGMA,
    THRESHOLDS,
    VERDICTS,
    Baseline,
    Thresholds,
    fleet_baseline,
    judge,
    repeat_median,
)

NAN = float("nan")


# --- thresholds --------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [{"min_drop": 0.0}, {"min_drop": 1.0}, {"min_drop": -0.1},
                                {"min_drop": 0.1, "hard_rel": 0.0},
                                {"min_drop": 0.1, "hard_rel": 1.0}])
def test_thresholds_outside_the_open_unit_interval_are_refused(kw):
    with pytest.raises(ValueError, match="min_drop and hard_rel must lie in"):
        Thresholds(**kw)


def test_thresholds_warn_line_may_not_sit_below_the_fail_line():
    with pytest.raises(ValueError, match="k_warn must not exceed k_fail"):
        Thresholds(min_drop=0.1, k_fail=3.0, k_warn=3.5)
    assert Thresholds(min_drop=0.1, k_fail=3.0, k_warn=3.0).k_warn == 3.0  # equal is allowed
    assert Thresholds(min_drop=0.999, hard_rel=0.001).min_drop == 0.999


def test_default_thresholds_are_six_and_three_and_a_half_sigma_and_ninety_percent():
    th = Thresholds(min_drop=0.001)
    assert (th.k_fail, th.k_warn, th.hard_rel, th.spec_frac) == (6.0, 3.5, 0.9, None)


def test_shipped_thresholds_per_probe():
    got = {k: (t.min_drop, t.k_fail, t.k_warn, t.hard_rel, t.spec_frac)
           for k, t in THRESHOLDS.items()}
    assert got == {
        "gemm": (0.02, 6.0, 3.5, 0.9, 0.70),
        "hbm": (0.02, 6.0, 3.5, 0.9, 0.80),
        "nvlink_allreduce": (0.04, 6.0, 3.5, 0.9, None),
        "scaleout_allreduce": (0.04, 6.0, 3.5, 0.9, None),
        "nvlink_plane": (0.10, 6.0, 3.5, 0.8, None),
        "thermal": (0.10, 0.0, 0.0, 0.9, None),
    }


# --- repeat medians and fleet baselines --------------------------------------------------------

def test_repeat_median_ignores_errored_repeats_and_is_nan_when_all_errored():
    samples = np.array([[1.0, 5.0, 7.0], [3.0, 99.0, 8.0], [2.0, 6.0, 9.0]])
    errs = np.array([[False, False, True], [False, True, True], [False, False, True]])
    med = repeat_median(samples, errs)
    assert med[0] == 2.0 and med[1] == 5.5 and np.isnan(med[2])


def test_repeat_median_of_no_repeats_is_zero_per_element():
    assert repeat_median(np.zeros((0, 3)), np.zeros((0, 3), bool)).tolist() == [0.0, 0.0, 0.0]
    assert repeat_median(np.zeros(0), np.zeros(0, bool)).tolist() == []


def test_fleet_baseline_median_and_mad_per_key_with_spec_and_sparse_fallbacks():
    medians = np.array([100.0, 101.0, 99.0, 100.0, 130.0,   # A: 5 samples -> median/MAD
                        50.0, 52.0, 54.0, 56.0,             # B: 4 samples -> spec
                        7.0, NAN, 9.0, NAN, 8.0, NAN])      # C: 3 finite of 6 -> spec
    keys = np.array(["A"] * 5 + ["B"] * 4 + ["C"] * 6)
    spec = np.arange(15, dtype=float) + 1000.0
    bl = fleet_baseline(medians, keys, spec_ref=spec)
    assert bl.reference[:5].tolist() == [100.0] * 5
    assert bl.sigma_rel[:5] == pytest.approx([MAD_TO_SIGMA * 1.0 / 100.0] * 5)
    assert MAD_TO_SIGMA == 1.4826
    assert bl.reference[5:].tolist() == spec[5:].tolist()
    assert bl.sigma_rel[5:].tolist() == [0.01] * 10
    assert bl.source == "fleet median/MAD of 5; spec"


def test_fleet_baseline_without_spec_uses_the_plain_median_of_a_sparse_key():
    medians = np.array([10.0, 30.0, 20.0, NAN, NAN, NAN])
    keys = np.array(["A", "A", "A", "A", "B", "B"])
    bl = fleet_baseline(medians, keys, default_sigma=0.02)
    assert bl.reference[:4].tolist() == [20.0] * 4
    assert np.isnan(bl.reference[4:]).all()
    assert bl.sigma_rel.tolist() == [0.02] * 6
    assert bl.source == "median of 0 (too few for MAD); median of 3 (too few for MAD)"


def test_fleet_baseline_counts_only_finite_samples_against_min_samples():
    keys = np.array(["A"] * 6)
    four = fleet_baseline(np.array([1.0, 1.0, 1.0, 1.0, NAN, NAN]), keys, min_samples=5)
    five = fleet_baseline(np.array([1.0, 1.0, 1.0, 1.0, 1.0, NAN]), keys, min_samples=5)
    assert four.source == "median of 4 (too few for MAD)"
    assert five.source == "fleet median/MAD of 5"
    assert fleet_baseline(np.ones(5), np.array(["A"] * 5)).source == "fleet median/MAD of 5"
    assert fleet_baseline(np.ones(4), np.array(["A"] * 4)).source == \
        "median of 4 (too few for MAD)"


def test_fleet_baseline_sigma_has_a_floor_and_a_zero_median_falls_back():
    identical = fleet_baseline(np.full(6, 42.0), np.array(["A"] * 6))
    assert identical.sigma_rel.tolist() == [1e-4] * 6
    zero = fleet_baseline(np.zeros(6), np.array(["A"] * 6), default_sigma=0.03)
    assert zero.reference.tolist() == [0.0] * 6
    assert zero.sigma_rel.tolist() == [0.03] * 6


def test_baseline_describe_rounds_reference_and_sigma():
    bl = Baseline(np.array([123.456789]), np.array([0.0123456]), "fleet")
    assert bl.describe(0) == {"reference": 123.4568, "sigma_rel": 0.01235, "baseline": "fleet"}


# --- judging -----------------------------------------------------------------------------------

def _judge_scenario():
    # min_drop dominates sigma: fail line 0.75, warn line 1 - 0.25/2 = 0.875, hard below 0.5.
    cols = [
        [100, 100, 100, 100],   # 0 pass
        [87.5] * 4,             # 1 exactly on the warn line: pass
        [80] * 4,               # 2 warn
        [75] * 4,               # 3 exactly on the fail line: warn, not fail
        [70] * 4,               # 4 fail on the median
        [100, 100, 100, 50],    # 5 one repeat exactly on the hard line: pass
        [100, 100, 40, 40],     # 6 two hard failures: fail, flapping
        [NAN, 100, 100, 100],   # 7 one errored repeat: fail, flapping
        [NAN] * 4,              # 8 every repeat errored
        [100] * 4,              # 9 failed by the caller (extra_fail)
        [10] * 4,               # 10 far below: confidence saturates
    ]
    samples = np.array(cols, dtype=float).T
    errs = np.isnan(samples)
    extra = np.zeros_like(errs)
    extra[2, 9] = True
    bl = Baseline(np.full(len(cols), 100.0), np.full(len(cols), 0.01), "test")
    th = Thresholds(min_drop=0.25, hard_rel=0.5)
    return judge(samples, errs, {7: "probe raised", 8: "rank died"}, bl, th, extra_fail=extra)


def test_judge_verdicts_on_and_around_each_line():
    j = _judge_scenario()
    assert [VERDICTS[v] for v in j.verdict] == [
        "pass", "pass", "warn", "warn", "fail", "pass", "fail", "fail", "fail", "fail", "fail"]
    assert j.failed.tolist() == [False] * 4 + [True, False] + [True] * 5
    assert j.hard_fails.tolist() == [0, 0, 0, 0, 0, 0, 2, 1, 4, 1, 4]
    assert j.healthy.tolist() == [4, 4, 4, 4, 0, 3, 2, 3, 0, 3, 0]
    assert j.flapping.tolist() == [False] * 6 + [True, True, False, True, False]
    assert j.fail_line.tolist() == [0.75] * 11
    assert j.median[:8].tolist() == [100, 87.5, 80, 75, 70, 100, 70, 100]
    assert np.isnan(j.median[8])


def test_judge_fail_rel_is_the_median_of_failing_repeats_errors_counting_as_zero():
    j = _judge_scenario()
    assert j.fail_rel(6) == 0.4
    assert j.fail_rel(7) == 0.0  # the errored repeat
    assert j.fail_rel(4) == 0.7
    assert j.fail_rel(0) == 1.0  # nothing failing: its median figure


def test_judge_confidence_per_kind_of_failure():
    j = _judge_scenario()
    assert j.confidence(7) == 0.99  # an error is near-certain
    assert j.confidence(6) == 0.775  # flapping: 0.6 + 0.35 x 2 of 4 repeats hard
    assert j.confidence(9) == 0.688  # 0.6 + 0.35 x 1 of 4, to three decimals
    assert j.confidence(4) == 0.6  # 0.5 + (0.75 - 0.7) / (2 x 0.25)
    assert j.confidence(10) == 0.99  # capped
    assert j.confidence(0) == 0.5  # floored


def test_judge_confidence_is_rounded_to_three_decimals():
    samples = np.full((4, 1), 71.23)
    bl = Baseline(np.array([100.0]), np.array([0.01]), "t")
    j = judge(samples, np.zeros_like(samples, bool), {}, bl,
              Thresholds(min_drop=0.25, hard_rel=0.5))
    assert j.confidence(0) == 0.575  # 0.5 + (0.75 - 0.7123) / 0.5 = 0.5754


def test_fail_rel_leaves_out_a_repeat_exactly_on_the_fail_line():
    samples = np.array([[75.0], [60.0], [100.0], [100.0]])
    bl = Baseline(np.array([100.0]), np.array([0.01]), "t")
    j = judge(samples, np.zeros_like(samples, bool), {}, bl,
              Thresholds(min_drop=0.25, hard_rel=0.5))
    assert j.fail_rel(0) == 0.6


def test_judge_takes_spec_value_and_extra_fail_by_keyword_only():
    # Both are per-element arrays like the positional ones: a swap would judge silently wrong.
    samples = np.ones((2, 1))
    bl = Baseline(np.array([1.0]), np.array([0.01]), "t")
    with pytest.raises(TypeError):
        judge(samples, np.zeros_like(samples, bool), {}, bl, Thresholds(min_drop=0.1),
              np.ones(1))  # type: ignore[misc]


def test_fleet_baseline_takes_its_options_by_keyword_only():
    with pytest.raises(TypeError):
        fleet_baseline(np.ones(5), np.array(["A"] * 5), np.ones(5))  # type: ignore[misc]


def test_fleet_baseline_of_fractions_below_one_uses_their_mad():
    # Figures that are fractions (the thermal probe's share of needed flow) sit below 1.
    bl = fleet_baseline(np.array([0.5, 0.52, 0.48, 0.5, 0.6]), np.array(["A"] * 5))
    assert bl.reference.tolist() == [0.5] * 5
    assert bl.sigma_rel == pytest.approx([MAD_TO_SIGMA * 0.02 / 0.5] * 5)


def test_one_healthy_repeat_among_hard_failures_is_flapping():
    samples = np.array([[100.0], [40.0], [40.0], [40.0]])
    bl = Baseline(np.array([100.0]), np.array([0.01]), "t")
    j = judge(samples, np.zeros_like(samples, bool), {}, bl,
              Thresholds(min_drop=0.25, hard_rel=0.5))
    assert (j.hard_fails.tolist(), j.healthy.tolist(), j.flapping.tolist()) == ([3], [1], [True])


def test_baselines_are_immutable():
    bl = Baseline(np.array([1.0]), np.array([0.01]), "t")
    with pytest.raises(AttributeError):
        bl.source = "other"  # type: ignore[misc]


def test_judge_confidence_band_has_a_floor_for_tight_lines():
    samples = np.full((4, 1), 99.9)
    th = Thresholds(min_drop=0.0005, k_fail=0.0, k_warn=0.0)
    j = judge(samples, np.zeros_like(samples, bool), {}, Baseline(
        np.array([100.0]), np.array([0.01]), "t"), th)
    assert j.fail_line[0] == pytest.approx(0.9995)
    assert j.failed.tolist() == [True]
    # band = max(1 - 0.9995, 0.001) = 0.001: 0.5 + 0.0005 / 0.002
    assert j.confidence(0) == 0.75


def test_judge_lines_follow_sigma_when_it_outweighs_min_drop():
    bl = Baseline(np.full(5, 100.0), np.full(5, 0.01), "t")
    samples = np.array([[96.6, 96.4, 94.1, 93.9, 100.0]] * 3)
    j = judge(samples, np.zeros_like(samples, bool), {}, bl, Thresholds(min_drop=0.02))
    assert j.fail_line == pytest.approx([0.94] * 5)  # 1 - 6 sigma
    # warn line 1 - 3.5 sigma = 0.965
    assert [VERDICTS[v] for v in j.verdict] == ["pass", "warn", "warn", "fail", "pass"]


def test_judge_spec_fraction_fails_a_part_the_fleet_shares():
    # The whole fleet is slow alike (the median is not enough), but the spec sheet says so.
    samples = np.array([[69.0, 70.0, 71.0]] * 3)
    bl = Baseline(np.full(3, 70.0), np.full(3, 0.01), "t")
    spec = np.full(3, 100.0)
    th = Thresholds(min_drop=0.2, spec_frac=0.70)
    j = judge(samples, np.zeros_like(samples, bool), {}, bl, th, spec_value=spec)
    assert j.failed.tolist() == [True, False, False]
    no_spec = judge(samples, np.zeros_like(samples, bool), {}, bl, Thresholds(min_drop=0.2),
                    spec_value=spec)
    assert no_spec.failed.tolist() == [False, False, False]
    no_value = judge(samples, np.zeros_like(samples, bool), {}, bl, th)
    assert no_value.failed.tolist() == [False, False, False]


def test_judge_evidence_names_the_source_and_rounds_figures():
    j = _judge_scenario()
    assert j.evidence(7, "GB/s", "twin") == {
        "simulated": True, "value": 100.0, "unit": "GB/s", "rel": 1.0, "fail_below_rel": 0.75,
        "repeats": 4, "repeats_failed_hard": 1, "reference": 100.0, "sigma_rel": 0.01,
        "baseline": "test", "error": "probe raised"}
    ev = j.evidence(8, "GB/s", "measured")
    assert ev["measured"] is True and "simulated" not in ev
    assert ev["value"] is None and ev["rel"] == 0.0 and ev["repeats_failed_hard"] == 4
    assert "error" not in j.evidence(0, "GB/s", "measured")
    samples = np.full((2, 1), 98.7654321)
    bl = Baseline(np.array([100.0]), np.array([0.001]), "t")
    j2 = judge(samples, np.zeros_like(samples, bool), {}, bl, Thresholds(min_drop=0.0123456))
    ev2 = j2.evidence(0, "TFLOPS", "twin")
    assert (ev2["value"], ev2["rel"], ev2["fail_below_rel"]) == (98.7654, 0.9877, 0.9877)


def test_thresholds_are_keyword_only_and_frozen():
    # A positional 0.02 could be read as min_drop or as k_fail: the config refuses to guess.
    with pytest.raises(TypeError):
        Thresholds(0.02)  # type: ignore[misc]
    th = Thresholds(min_drop=0.02)
    with pytest.raises(AttributeError):
        th.min_drop = 0.5  # type: ignore[misc]
