"""The engine's own behaviour: determinism, accounting, spares, escalation, stragglers, and
agreement with the same model written plainly in SimPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rackscale.simulate import SimResult, make_config, plan, run, simulate, summarize
from rackscale.simulate.simpy_ref import simulate_simpy

VOLATILE = {"run_id", "wall_s"}


def strip(r: SimResult) -> dict:
    return {k: v for k, v in r.as_dict().items() if k not in VOLATILE}


def test_same_seed_same_result_other_seed_differs(seed504):
    cfg = make_config(job_gpus=432, days=30, trials=50, seed=11)
    a, b = run(cfg, seed504), run(cfg, seed504)
    assert strip(a) == strip(b)
    c = run(cfg.model_copy(update={"seed": 12}), seed504)
    assert c.ettr != a.ettr


def test_time_accounting_adds_up_to_the_horizon(nvl20):
    cfg = make_config(job_gpus=16 * 64, days=20, trials=30, rate_scale=30, spare_trays=2,
                      escalate_at=3, spare_domains=2, straggler_ratio=0.5)
    p = plan(cfg, nvl20)
    tl = simulate(p)
    total = (tl.useful_wall + tl.checkpoint + tl.recompute + tl.detect + tl.restart + tl.wait)
    np.testing.assert_allclose(total, p.horizon_h, rtol=1e-9)
    assert (tl.work <= tl.useful_wall + 1e-9).all()
    r = summarize(p, tl, 0.0)
    g = r.goodput
    assert g.scheduling * g.runtime * g.program == pytest.approx(g.total, rel=0.02)
    assert r.simulated is True and "simulated" in r.note


def test_no_failures_means_only_checkpoint_cost(seed504):
    cfg = make_config(job_gpus=504, days=10, trials=3, rate_scale=1e-9, ckpt_interval_min=30,
                      ckpt_cost_s=180)
    r = run(cfg, seed504)
    assert r.ettr.mean == pytest.approx(30 / 33, rel=1e-3)  # 30 min work per 33 min


def test_spares_cut_waiting_and_raise_ettr(nvl20):
    base = dict(job_gpus=16 * 72, days=30, trials=60, rate_scale=3)
    none = run(make_config(spare_domains=0, **base), nvl20)
    four = run(make_config(spare_domains=4, **base), nvl20)
    wait = "waiting for repair or spare"
    assert none.lost_hours_by_cause[wait] > 5 * four.lost_hours_by_cause[wait]
    assert four.ettr.mean > none.ettr.mean + 0.05
    assert none.goodput.scheduling < four.goodput.scheduling


def test_rack_escalation_pulls_racks_only_when_enabled(nvl20):
    base = dict(job_gpus=16 * 64, days=30, trials=40, rate_scale=30, spare_trays=2,
                spare_domains=4)
    off = run(make_config(escalate_at=0, **base), nvl20)
    on = run(make_config(escalate_at=2, **base), nvl20)
    assert off.rack_escalations == 0
    assert on.rack_escalations > 1
    # hot-spare trays absorb tray faults without a rack swap unless escalation pulls the rack
    assert on.unit_swaps > off.unit_swaps


def test_stragglers_slow_the_job_until_found(seed504):
    base = dict(job_gpus=432, days=30, trials=80, rate_scale=5)
    calm = run(make_config(straggler_ratio=0, **base), seed504)
    slow = run(make_config(straggler_ratio=1.0, straggler_detect_min=120, **base), seed504)
    assert calm.lost_hours_by_cause["straggler slowdown"] == 0
    assert calm.goodput.program == pytest.approx(1.0)
    assert slow.lost_hours_by_cause["straggler slowdown"] > 1
    assert slow.goodput.program < 0.999
    assert slow.interruptions_by_cause["straggler (fail-slow)"] > 0


def test_tray_alignment_allocates_trays(seed504):
    r = run(make_config(job_gpus=100, days=5, trials=5, align="tray"), seed504)
    assert r.units_job == 25 and r.job_gpus_allocated == 100
    assert r.units_spare == 126 - 25


@pytest.mark.parametrize("extra", [
    dict(spare_trays=2, escalate_at=3, spare_domains=2, straggler_ratio=0.5, rate_scale=30),
    dict(spare_domains=2, escalate_at=2, ckpt_cost_s=300, rate_scale=10),
])
def test_engine_and_simpy_agree_within_monte_carlo_error(nvl20, extra):
    cfg = make_config(job_gpus=16 * 64 if "spare_trays" in extra else 16 * 72, days=20,
                      trials=120, **extra)
    p = plan(cfg, nvl20)
    a = summarize(p, simulate(p), 0.0)
    b = summarize(p, simulate_simpy(p), 0.0)
    se = math.hypot(a.ettr.ci95, b.ettr.ci95) / 1.96
    assert abs(a.ettr.mean - b.ettr.mean) < 4 * se, (a.ettr, b.ettr)
    for key in ("recompute", "waiting for repair or spare", "restart"):
        x, y = a.lost_hours_by_cause[key], b.lost_hours_by_cause[key]
        assert abs(x - y) <= 0.15 * max(x, y) + 0.5, (key, x, y)
