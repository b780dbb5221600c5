"""Properties over random policies: time adds up, ETTR is a ratio, the same seed repeats."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.fleet import synthetic_fleet
from rackscale.simulate import FleetShape, make_config, plan, simulate

FLEET = FleetShape.from_spec(synthetic_fleet(6))


@settings(max_examples=25, deadline=None)
@given(
    racks=st.integers(1, 5), spare_trays=st.integers(0, 3), escalate=st.integers(0, 4),
    interval=st.floats(1, 240), cost=st.floats(0, 900), restart=st.floats(0, 60),
    detect=st.one_of(st.none(), st.floats(0, 120)), scale=st.floats(1, 400),
    straggler=st.floats(0, 2), align=st.sampled_from(["domain", "tray"]),
    seed=st.integers(0, 2**31),
)
def test_time_adds_up_and_repeats(racks, spare_trays, escalate, interval, cost, restart,
                                  detect, scale, straggler, align, seed):
    if align == "tray":
        spare_trays = 0
    per_rack = (18 - spare_trays) * 4 if align == "domain" else 72
    cfg = make_config(job_gpus=racks * per_rack, days=7, trials=4, align=align,
                      spare_trays=spare_trays, escalate_at=escalate, ckpt_interval_min=interval,
                      ckpt_cost_s=cost, restart_min=restart, detect_min=detect,
                      rate_scale=scale, straggler_ratio=straggler, seed=seed)
    p = plan(cfg, FLEET)
    a = simulate(p)
    total = a.useful_wall + a.checkpoint + a.recompute + a.detect + a.restart + a.wait
    np.testing.assert_allclose(total, p.horizon_h, rtol=1e-9, atol=1e-9)
    for part in (a.useful_wall, a.checkpoint, a.recompute, a.detect, a.restart, a.wait):
        assert (part >= -1e-9).all()
    assert ((a.work >= 0) & (a.work <= a.useful_wall + 1e-9)).all()
    b = simulate(p)
    np.testing.assert_array_equal(a.work, b.work)
    np.testing.assert_array_equal(a.interruptions, b.interruptions)
