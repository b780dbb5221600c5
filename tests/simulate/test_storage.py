"""Storage in the simulator: the scaling model, the restore/roll-back rules in the engine, the
what-if against the closed-form ETTR of memoryless failures, and bad profiles (exit 2).

The profiles here are written from chosen numbers so that the expected figures are known; the
test that a profile measured on real SeaweedFS drives the simulator is in
tests/checkpoint/test_profile.py."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.checkpoint import fit_affine, parse_profile
from rackscale.cli import app
from rackscale.fleet import synthetic_fleet
from rackscale.simulate import (
    FleetShape,
    StorageTimes,
    make_config,
    meta_ettr,
    plan,
    renewal_ettr,
    run,
    scale_fits,
    storage_whatif,
)
from rackscale.simulate.whatif import draw_failures, evaluate

runner = CliRunner()
GB = 10**9
NOW = datetime(2026, 12, 1, tzinfo=UTC).isoformat()


def _fig(s: float, where: str = "test") -> dict:
    return {"seconds": s, "samples": [s], "where": where, "at": NOW}


def profile_dict(restore_region: tuple[float, float] = (0.05, 1e9)) -> dict:
    """A profile whose figures follow latency + S / bandwidth exactly; (latency s, B/s)."""
    models = {"stall": (0.001, 20e9), "local": (0.01, 4e9), "region": (0.2, 2e9),
              "replicated": (0.4, 1e9), "archived": (0.6, 0.5e9)}
    restore = {"local": (0.005, 8e9), "us-east": restore_region, "us-west": (0.1, 0.8e9),
               "archive": (0.5, 0.3e9)}
    points = []
    for size, probe in ((64 << 10, True), (1 << 30, False)):
        points.append({
            "bytes": size, "probe": probe,
            "save": {k: _fig(lat + size / bw) for k, (lat, bw) in models.items()},
            "restore": {k: _fig(lat + size / bw) for k, (lat, bw) in restore.items()}})
    return {"schema": "rackscale.storage-profile", "schema_version": 1, "measured": True,
            "host": "h", "started_at": NOW, "finished_at": NOW,
            "tiers": [{"name": "local", "role": "local", "kind": "dir", "where": "/nvme"},
                      {"name": "us-east", "role": "region", "kind": "s3", "where": "e"},
                      {"name": "us-west", "role": "replica", "kind": "s3", "where": "w"},
                      {"name": "archive", "role": "archive", "kind": "s3", "where": "a"}],
            "points": points}


@pytest.fixture(scope="module")
def fleet() -> FleetShape:
    return FleetShape.from_spec(synthetic_fleet(300))  # 21,600 GPUs


@given(lat=st.floats(0, 10), bw=st.floats(1e6, 1e11),
       sizes=st.lists(st.integers(1, 1 << 40), min_size=2, max_size=5, unique=True))
def test_affine_fit_recovers_latency_and_bandwidth(lat: float, bw: float, sizes: list[int]):
    fit = fit_affine(sizes, [lat + s / bw for s in sizes])
    # the least-squares fit is exact up to rounding of the larger term
    tol = 1e-6 * (lat + max(sizes) / bw)
    assert fit["latency_s"] == pytest.approx(lat, abs=tol)
    assert fit["latency_s"] + max(sizes) / fit["bandwidth_Bps"] == pytest.approx(
        lat + max(sizes) / bw, rel=1e-6)


def test_scaling_is_latency_bound_below_the_crossover_and_bandwidth_bound_above():
    fits = parse_profile(profile_dict()).fits()
    small = scale_fits(fits, 1_000)
    big = scale_fits(fits, 100 * GB)
    assert small.restore_region_s == pytest.approx(0.05, rel=1e-3)  # latency
    assert big.restore_region_s == pytest.approx(0.05 + 100, rel=1e-3)  # 100 GB at 1 GB/s
    assert big.save_stall_s == pytest.approx(0.001 + 5, rel=1e-3)
    # the tiers are reached in order even when a fit says otherwise
    assert big.durable_local_s <= big.durable_region_s <= (big.durable_replicated_s or 0)


def _storage(restore: float, *, exposed: float = 0.0, **over: object) -> StorageTimes:
    """Every restore takes `restore` s; a checkpoint is durable `exposed` s after its stall."""
    base = {"save_stall_s": 30.0, "durable_local_s": 30.0 + exposed,
            "durable_region_s": 30.0 + exposed, "durable_replicated_s": 30.0 + exposed,
            "restore_local_s": restore, "restore_region_s": restore,
            "restore_replica_s": restore, "local_cache": False}
    return StorageTimes(**(base | over))


def _cfg(st_: StorageTimes | None, **over: object):
    values = {"job_gpus": 16_384, "days": 30, "trials": 200, "seed": 3, "straggler_ratio": 0,
              "detect_min": 0, "restart_min": 5, "ckpt_interval_min": 30, "storage": st_}
    return make_config(**(values | over))


def test_restore_time_adds_to_the_lost_time_of_every_failure(fleet):
    """The engine: lost restart time per failure grows by the restore-time difference, and
    ETTR falls by what the Meta formula's u0 + r predicts."""
    a = run(_cfg(_storage(60.0)), fleet)
    b = run(_cfg(_storage(660.0)), fleet)  # +10 min restore
    per_a = a.lost_hours_by_cause["restart"] / a.interruptions.mean
    per_b = b.lost_hours_by_cause["restart"] / b.interruptions.mean
    # a failure during a recovery cuts it short, so slightly less than the whole 10 min
    assert per_b - per_a == pytest.approx(600 / 3600, rel=0.08)
    p = plan(_cfg(_storage(60.0)), fleet)
    predicted = p.fail_rate_h * (600 / 3600) / (1 + p.w_h / p.tau_h)
    drop = a.ettr.mean - b.ettr.mean
    assert drop == pytest.approx(predicted, rel=0.2)


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(restore=st.floats(0, 1200), exposed=st.floats(0, 1500), interval=st.floats(10, 60),
       cache=st.booleans(), losses=st.sampled_from([0.0, 100.0]))
def test_engine_and_whatif_agree_when_no_job_waits(fleet, restore, exposed, interval, cache,
                                                   losses):
    """Two implementations of the same rules (event engine, closed form) on different draws:
    restores by tier, roll-backs of checkpoints not yet durable, region losses."""
    st_ = _storage(restore, exposed=exposed, local_cache=cache, restore_local_s=restore / 10,
                   region_loss_per_year=losses, region_outage_h=2.0)
    cfg = _cfg(st_, ckpt_interval_min=interval)
    eng = run(cfg, fleet)
    p = plan(cfg, fleet)
    ev = evaluate(p, draw_failures(p))
    ettr = ev["work"] / p.horizon_h
    se = math.hypot(eng.ettr.ci95, 1.96 * ettr.std(ddof=1) / math.sqrt(ettr.size))
    assert abs(eng.ettr.mean - ettr.mean()) < 1.5 * se + 1e-3


def test_a_checkpoint_not_yet_durable_rolls_back_one_more_interval(fleet):
    base = _cfg(_storage(60.0))
    slow = _cfg(_storage(60.0, exposed=900.0))  # 15 min of a 30 min cycle exposed
    p0, p1 = plan(base, fleet), plan(slow, fleet)
    f = draw_failures(p0)
    lost = (evaluate(p0, f)["work"] - evaluate(p1, f)["work"]).mean()
    n = evaluate(p0, f)["interruptions"].mean()
    # a failure lands in the exposed window of a run with a checkpoint behind it with
    # probability about exposed / cycle x P(run long enough): expect roughly tau * 900/1830
    cycle = p0.tau_h + p0.w_h
    reach = math.exp(-p0.fail_rate_h * cycle)  # P(a run completes one cycle)
    expected = n * reach * p0.tau_h * (900 / 3600) / cycle
    assert lost == pytest.approx(expected, rel=0.25)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(restore=st.floats(0, 1800), interval=st.floats(10, 90), scale=st.floats(0.3, 2.0))
def test_whatif_matches_the_closed_form_for_memoryless_failures(fleet, restore, interval, scale):
    """ETTR with restore time r: the renewal ETTR (and Meta's approximation) with u0 + r."""
    cfg = _cfg(_storage(restore), ckpt_interval_min=interval, rate_scale=scale, trials=300)
    out = storage_whatif(cfg, fleet, cfg.storage, [interval])
    got = out["setups"]["neither"]["points"][0]["ettr"]
    p = plan(cfg, fleet)
    u = p.u0_h + restore / 3600
    exact = renewal_ettr(p.fail_rate_h, p.tau_h, u, p.w_h)
    # the job keeps its unsaved work at the horizon: at most one interval of 30 days
    assert abs(got["mean"] - exact) <= 3 * got["ci95"] + p.tau_h / p.horizon_h + 1e-4
    # Meta's formula is the first-order term: it is off by about half the square of the
    # failures' share of a cycle
    meta = meta_ettr(1, p.fail_rate_h * 24, u, p.tau_h, p.w_h)
    second = (p.fail_rate_h * (u + p.tau_h / 2)) ** 2
    assert got["mean"] == pytest.approx(meta, abs=second + 3 * got["ci95"] + 1e-3)


def test_whatif_prices_replication_at_the_outage_it_avoids(fleet):
    st_ = _storage(120.0, region_loss_per_year=200.0, region_outage_h=6.0)
    cfg = _cfg(st_, trials=100)
    out = storage_whatif(cfg, fleet, st_, [30], gpu_hour_price=3.0)
    s = out["setups"]
    assert s["cache+replication"]["points"][0]["ettr"]["mean"] > \
        s["cache only"]["points"][0]["ettr"]["mean"]
    buys = out["buys_per_month"]["replication (with local cache)"]
    losses = 200 / 8766 * 30 * 24  # region losses per 30-day month
    # each avoided outage is 6 h of the job's GPUs, less what failures during it cost anyway
    per_loss = buys["gpu_hours"]["mean"] / losses / cfg.job_gpus
    assert 4.0 < per_loss < 6.5
    assert buys["money"]["mean"] == pytest.approx(3.0 * buys["gpu_hours"]["mean"])
    assert out["simulated"] is True and "measured" in out["storage"]["basis"]
    for setup in s.values():
        assert setup["optimal_interval_min"] == 30 and setup["young_min"] > 0


def test_region_loss_is_a_cause_in_simulate_run(fleet):
    st_ = _storage(120.0, region_loss_per_year=365.0)
    out = run(_cfg(st_, trials=50), fleet)
    assert out.interruptions_by_cause["region loss (power, network)"] == pytest.approx(
        30, rel=0.2)


# ------------------------------------------------------------------------ the CLI, exit 2
def _write(tmp: Path, data: object) -> str:
    p = tmp / "profile.json"
    p.write_text(json.dumps(data))
    return str(p)


def _mutate(fn) -> dict:
    d = profile_dict()
    fn(d)
    return d


BAD = {
    "missing region tier": (_mutate(lambda d: d["tiers"].pop(1)), "role 'region'"),
    "missing restore figure": (_mutate(lambda d: d["points"][1]["restore"].pop("us-west")),
                               "points.1.restore"),
    "negative time": (_mutate(lambda d: d["points"][0]["save"]["stall"].update(seconds=-1.0)),
                      "points.0.save.stall.seconds"),
    "other schema version": (_mutate(lambda d: d.update(schema_version=2)), "version 2"),
    "not an object": ([1, 2], "JSON object"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_profiles_exit_2_with_the_field_named(tmp_path, case):
    data, needle = BAD[case]
    path = _write(tmp_path, data)
    for cmd in (["simulate", "run", "--trials", "2", "--days", "1"],
                ["simulate", "storage-whatif", "--trials", "2", "--days", "1"]):
        res = runner.invoke(app, [*cmd, "--fleet", "seed-504", "--storage", path])
        assert res.exit_code == 2, res.output
        assert needle in res.output and path in res.output
        assert "Traceback" not in res.output


def test_missing_profile_file_exits_2(tmp_path):
    res = runner.invoke(app, ["simulate", "run", "--fleet", "seed-504", "--storage",
                              str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "checkpoint profile" in res.output


def test_whatif_json_is_valid_and_labelled(tmp_path):
    path = _write(tmp_path, profile_dict())
    res = runner.invoke(app, ["simulate", "storage-whatif", "--fleet", "seed-504", "--storage",
                              path, "--ckpt-size", "1TB", "--trials", "20", "--intervals",
                              "10,30", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out["setups"]) == {"cache+replication", "cache only", "replication only",
                                  "neither"}
    assert out["storage"]["shard_bytes"] == 10**12 // 126  # 504 GPUs = 126 trays
    assert "measured" in out["storage"]["basis"] and out["simulated"] is True


def test_region_loss_with_replication_needs_a_replica_in_the_profile(tmp_path):
    d = profile_dict()
    d["tiers"] = [t for t in d["tiers"] if t["role"] != "replica"]
    for p in d["points"]:
        p["restore"].pop("us-west")
        p["save"].pop("replicated")
    path = _write(tmp_path, d)
    res = runner.invoke(app, ["simulate", "storage-whatif", "--fleet", "seed-504", "--storage",
                              path, "--trials", "2", "--days", "1"])
    assert res.exit_code == 2 and "no other-region tier" in res.output, res.output
    res = runner.invoke(app, ["simulate", "run", "--fleet", "seed-504", "--storage", path,
                              "--no-replication", "--region-loss-per-year", "5", "--trials",
                              "2", "--days", "1", "--json"])
    assert res.exit_code == 0, res.output


def test_whatif_refuses_sizes_that_would_not_fit_in_memory(tmp_path):
    path = _write(tmp_path, profile_dict())
    res = runner.invoke(app, ["simulate", "storage-whatif", "--fleet", "seed-504", "--storage",
                              path, "--trials", "100000", "--days", "3000", "--json"])
    assert res.exit_code == 2, res.output
    assert "fewer --trials" in json.loads(res.stdout)["error"]["message"]


def test_whatif_optimum_sits_at_young_daly_when_the_write_blocks(fleet):
    """A blocking 5-minute write, memoryless failures: the fitted best interval of every setup
    is within 15% of Daly's (as the engine's sweep is)."""
    st_ = _storage(60.0, save_stall_s=300.0, durable_local_s=300.0, durable_region_s=300.0,
                   durable_replicated_s=300.0)
    cfg = _cfg(st_, trials=300, rate_scale=2.0)
    out = storage_whatif(cfg, fleet, st_, [10, 15, 20, 25, 30, 40, 50, 70])
    for s in out["setups"].values():
        assert s["fitted_optimum_min"] == pytest.approx(s["daly_min"], rel=0.15)


def test_whatif_refuses_a_price_past_its_bound(tmp_path):
    path = _write(tmp_path, profile_dict())
    for price in ("1e308", "nan"):
        res = runner.invoke(app, ["simulate", "storage-whatif", "--fleet", "seed-504",
                                  "--storage", path, "--trials", "2", "--intervals", "10",
                                  "--gpu-hour-price", price])
        assert res.exit_code == 2 and "--gpu-hour-price" in res.output, res.output
        assert "1,000,000" in res.output
