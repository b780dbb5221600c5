"""`rackscale checkpoint profile` on two real SeaweedFS regions, and the profile driving the
simulator: a slower region restore in the profile costs every failure that restores from the
region exactly that much more (the engine's lost restart time per failure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.checkpoint import load_profile, parse_profile
from rackscale.checkpoint.seaweed import SeaweedFS
from rackscale.cli import app
from rackscale.fleet import synthetic_fleet
from rackscale.simulate import FleetShape, make_config, run, scale_fits
from tests.checkpoint.conftest import s3_config

runner = CliRunner()


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory,
             regions: tuple[SeaweedFS, SeaweedFS]) -> tuple[Path, dict, dict]:
    tmp = tmp_path_factory.mktemp("profile")
    cfg = s3_config(tmp, *regions)
    (tmp / "tiers.json").write_text(json.dumps(cfg))
    out = tmp / "out" / "storage-profile.json"
    res = runner.invoke(app, ["checkpoint", "profile", "--config", str(tmp / "tiers.json"),
                              "--ckpt-size", "1MiB", "--reps", "2", "--out", str(out.parent),
                              "--json"])
    assert res.exit_code == 0, res.output
    return out, cfg, json.loads(res.stdout)


def test_profile_measures_every_tier_with_where_and_when(measured, regions):
    out, cfg, printed = measured
    prof = load_profile(out)
    east, west = regions
    assert [(t.name, t.role) for t in prof.tiers] == [
        ("local", "local"), ("us-east", "region"), ("us-west", "replica"),
        ("archive", "archive")]
    assert prof.tier("region").where == f"{east.endpoint}/{cfg['region']['bucket']}"
    assert prof.tier("replica").where.startswith(west.endpoint)
    assert [p.bytes for p in prof.points] == [64 << 10, 1 << 20]
    assert prof.points[0].probe and not prof.points[1].probe
    for p in prof.points:
        s = p.save
        for fig in (s.stall, s.local, s.region, s.replicated, s.archived, *p.restore.values()):
            assert fig is not None and len(fig.samples) == 2 and fig.seconds > 0
            assert prof.started_at <= fig.at <= prof.finished_at
        # the saver reaches the tiers in order, each after the stall
        assert s.stall.seconds < s.local.seconds < s.region.seconds < s.replicated.seconds
        assert p.restore["us-east"].where.startswith(east.endpoint)
    assert printed["schema"] == "rackscale.storage-profile" and printed["measured"] is True
    assert set(printed["fits"]) >= {"stall", "region", "restore.local", "restore.replica"}


def test_profile_leaves_nothing_behind(measured, regions):
    _, cfg, _ = measured
    east, west = regions
    for weed, spec in ((east, cfg["region"]), (west, cfg["replicas"][0]),
                       (east, cfg["archive"])):
        assert weed.store(spec["bucket"], create=False).list("") == []
    assert not list(Path(cfg["local_dir"]).glob(".profile-*"))


def test_measured_profile_drives_simulate_run(measured):
    out, _, _ = measured
    res = runner.invoke(app, ["simulate", "run", "--fleet", "seed-504", "--storage", str(out),
                              "--ckpt-size", "100GB", "--trials", "10", "--days", "5",
                              "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    st = scale_fits(load_profile(out).fits(), 100 * 10**9 // 126)
    assert got["ckpt_cost_s"] == pytest.approx(st.save_stall_s)
    assert got["simulated"] is True


def test_slower_region_restore_costs_each_failure_the_difference(measured):
    out, _, _ = measured
    data = json.loads(out.read_text())
    fleet = FleetShape.from_spec(synthetic_fleet(300))
    slow = json.loads(json.dumps(data))
    for p in slow["points"]:  # the region answers 10 minutes later, whatever the size
        f = p["restore"]["us-east"]
        f["seconds"] += 600.0
        f["samples"] = [s + 600.0 for s in f["samples"]]
    results = []
    for d in (data, slow):
        st = scale_fits(parse_profile(d).fits(), 10**9, local_cache=False)
        cfg = make_config(job_gpus=16_384, days=30, trials=200, seed=5, straggler_ratio=0,
                          detect_min=0, storage=st)
        results.append(run(cfg, fleet))
    per = [r.lost_hours_by_cause["restart"] / r.interruptions.mean for r in results]
    # every failure restores from the region; one during a recovery cuts it a little short
    assert per[1] - per[0] == pytest.approx(600 / 3600, rel=0.08)
    assert results[1].ettr.mean < results[0].ettr.mean


def test_a_tier_that_does_not_answer_is_named_with_exit_2(tmp_path: Path) -> None:
    from rackscale.checkpoint.seaweed import free_port
    cfg = {"local_dir": str(tmp_path / "local"),
           "region": {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:"
                      f"{free_port()}", "bucket": "b", "access_key": "a", "secret_key": "s",
                      "timeout_s": 1.0}}
    (tmp_path / "tiers.json").write_text(json.dumps(cfg))
    res = runner.invoke(app, ["checkpoint", "profile", "--config", str(tmp_path / "tiers.json"),
                              "--ckpt-size", "1MiB", "--reps", "1", "--out", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert "tier us-east failed" in res.output and "measure again" in res.output
    assert not (tmp_path / "storage-profile.json").exists()
    assert not list((tmp_path / "local").glob(".profile-*"))  # nothing left behind
