"""Every size of bench/bench_simulate.py is a fleet the fleet model accepts and a job the
simulator plans (its default of 2,048 racks was over the fleet cap: the script crashed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rackscale.simulate import plan

BENCH = Path(__file__).parents[2] / "bench" / "bench_simulate.py"


@pytest.mark.parametrize("size", ["quick", "full"])
def test_bench_simulate_sizes_fit_the_fleet_cap(size: str) -> None:
    spec = importlib.util.spec_from_file_location("bench_simulate", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fleet, cfg = mod.config(size)
    p = plan(cfg, fleet)
    assert p.job_gpus_alloc >= cfg.job_gpus and fleet.gpus <= 131_072
