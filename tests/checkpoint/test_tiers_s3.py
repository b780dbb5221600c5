"""Integration: the tiers on two real SeaweedFS instances (us-east, us-west) started by fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rackscale.checkpoint import (
    CheckpointManager,
    Restorer,
    StoreAuthError,
    StoreUnreachable,
    Tiers,
    UnknownCheckpoint,
    gc,
    parse_config,
)
from rackscale.checkpoint.seaweed import SeaweedFS, free_port
from tests.checkpoint.conftest import s3_config


def state(seed: int, mib: int = 11) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"model.w": torch.randn(mib * 256 * 1024 // 4 * 4, generator=g).reshape(-1, 1024),
            "opt/step": np.array([seed], dtype=np.int64), "rng": bytes([seed % 256]) * 100}


def same(a: dict, b: dict) -> bool:
    return (torch.equal(a["model.w"], b["model.w"]) and np.array_equal(a["opt/step"],
            b["opt/step"]) and a["rng"] == b["rng"])


def test_save_walks_every_tier_with_state_times(s3_tiers: Tiers) -> None:
    with CheckpointManager(s3_tiers) as mgr:
        r1 = mgr.save(1, state(1)).wait(60)
        r2 = mgr.save(2, state(2)).wait(60)
    assert r1.errors == {} and r2.errors == {}
    assert list(r1.states) == ["staged", "local", "region", "replicated"]
    assert list(r2.states) == ["staged", "local", "region", "replicated", "archived"]
    times = list(r2.states.values())
    assert times == sorted(times) and r2.rpo_s is not None and r2.rpo_s > 0
    assert r2.stats.parts_sent >= 3 * 3  # 11 MiB item = 3 parts, to region, replica, archive
    for store in s3_tiers.remote:
        m = s3_tiers.read_manifest(store, "step-00000002")
        assert m is not None and m.tier == store.name and m.hash == r2.hash
    assert s3_tiers.read_manifest(s3_tiers.archive, "step-00000001") is None  # every 2nd
    got, rep = Restorer(s3_tiers).load_state("latest")
    assert rep.id == "step-00000002" and rep.tier == "local" and same(got, state(2))


def test_restore_when_a_region_is_down_comes_from_the_other(tmp_path: Path,
                                                           regions: tuple) -> None:
    _, west = regions
    lone = SeaweedFS(tmp_path / "weed-lone", name="us-east").start()
    try:
        cfg = parse_config(s3_config(tmp_path, lone, west, archive=None))
        with CheckpointManager(cfg) as mgr:
            assert mgr.save(5, state(5)).wait(60).errors == {}
        shutil.rmtree(Path(cfg.local_dir) / "cache")  # a fresh node: nothing cached
    finally:
        lone.stop()
    got, rep = Restorer(Tiers(cfg)).load_state("step-00000005")
    assert same(got, state(5))
    assert rep.tier == "us-west" and rep.manifest_from == "us-west"
    assert "us-east" in rep.unreachable and "does not answer" in rep.unreachable["us-east"]
    # The local cache was filled on the way: a second restore is served locally.
    assert Restorer(Tiers(cfg)).restore("step-00000005").tier == "local"


def test_flipped_byte_is_detected_and_repaired_from_another_tier(s3_tiers: Tiers) -> None:
    with CheckpointManager(s3_tiers) as mgr:
        mgr.save(7, state(7)).wait(60)
    key = s3_tiers.layout.data("step-00000007", "model.w")
    blob = bytearray(s3_tiers.region.get(key))
    blob[200] ^= 0xFF  # chunk 0 of the region copy: local and region are both bad there
    s3_tiers.region.put(key, bytes(blob))
    local = s3_tiers.local.path(key)
    raw = bytearray(local.read_bytes())
    raw[100] ^= 0x01  # chunk 0 of the local copy
    local.write_bytes(bytes(raw))
    assert not Restorer(s3_tiers).verify("step-00000007", s3_tiers.region)["ok"]
    got, rep = Restorer(s3_tiers).load_state("step-00000007")
    assert same(got, state(7))
    bad = {(b["tier"], b["chunk"]) for b in rep.bad_chunks}
    assert ("local", 0) in bad and ("us-east", 0) in bad
    assert rep.served_by["us-west"] == 1  # the good copy came from the other region
    assert "us-east:model.w" in rep.repaired and "local:model.w#0" in rep.repaired
    for store in (s3_tiers.local, s3_tiers.region):
        assert Restorer(s3_tiers).verify("step-00000007", store)["ok"], store.name


def test_a_checkpoint_resaved_upstream_is_never_served_stale(tmp_path: Path,
                                                             regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions, replicas=[], archive=None)
    a = parse_config(cfg)
    with CheckpointManager(a) as mgr:
        mgr.save(9, state(9, mib=1)).wait(60)
    ta = Tiers(a)
    ta.region.delete(ta.layout.manifest("step-00000009"))  # an operator deletes and re-saves
    b = parse_config(cfg | {"local_dir": str(tmp_path / "other-node")})
    with CheckpointManager(b) as mgr:
        assert mgr.save(9, state(99, mib=1)).wait(60).errors == {}
    got, rep = Restorer(ta).load_state("step-00000009")
    assert rep.stale_cache_dropped and same(got, state(99, mib=1))


def test_unknown_id_bad_credentials_and_unreachable_are_clear_and_lose_nothing(
        tmp_path: Path, regions: tuple) -> None:
    east, west = regions
    good = s3_config(tmp_path, east, west, archive=None, replicas=[])
    with CheckpointManager(parse_config(good)) as mgr:
        mgr.save(1, state(1, mib=1)).wait(60)
    tiers = Tiers(parse_config(good))
    with pytest.raises(UnknownCheckpoint, match="step-00000001"):
        Restorer(tiers).restore("step-00000404")

    bad_key = good | {"region": good["region"] | {"secret_key": "wrong"}}
    with pytest.raises(StoreAuthError, match="refused the credentials"):
        Tiers(parse_config(bad_key)).region.check()
    with CheckpointManager(parse_config(bad_key)) as mgr:
        r = mgr.save(2, state(2, mib=1)).wait(60)
    assert list(r.states) == ["staged", "local"] and "refused" in r.errors["us-east"]

    dead = good | {"region": good["region"] | {"endpoint": f"http://127.0.0.1:{free_port()}"}}
    with CheckpointManager(parse_config(dead)) as mgr:
        r = mgr.save(3, state(3, mib=1)).wait(60)
    assert list(r.states) == ["staged", "local"] and "does not answer" in r.errors["us-east"]
    with pytest.raises(StoreUnreachable):
        Tiers(parse_config(dead)).region.check()
    elsewhere = parse_config(dead | {"local_dir": str(tmp_path / "empty-node")})
    with pytest.raises(StoreUnreachable, match="no remote tier answered"):
        Restorer(Tiers(elsewhere)).restore("step-00000001")
    # Nothing lost: the region still holds 1, and the local cache holds 1, 2 and 3.
    assert tiers.committed_ids(tiers.region) == ["step-00000001"]
    assert tiers.committed_ids(tiers.local) == ["step-00000001", "step-00000002",
                                                "step-00000003"]
    # A saver with good keys resumes the two that never reached the region.
    with CheckpointManager(parse_config(good)) as mgr:
        resumed = mgr.resume()
    assert sorted(r.id for r in resumed) == ["step-00000002", "step-00000003"]
    assert all("region" in r.states for r in resumed)
    assert tiers.committed_ids(tiers.region) == ["step-00000001", "step-00000002",
                                                 "step-00000003"]


@pytest.mark.parametrize("policy", ["skip", "wait"])
def test_backpressure_policy_is_explicit_and_reported(tmp_path: Path, regions: tuple,
                                                      policy: str) -> None:
    cfg = parse_config(s3_config(tmp_path, *regions, backpressure=policy, archive=None))
    with CheckpointManager(cfg) as mgr:
        first = mgr.save(1, state(1, mib=16))
        second = mgr.save(2, state(2, mib=1))
        assert not first.done() or second.report.action != "skipped"
        r2 = second.wait(60)
    if policy == "skip":
        assert r2.action == "skipped" and r2.states == {}
    else:
        assert r2.action == "waited" and r2.waited_s > 0 and "replicated" in r2.states


def test_retention_keeps_latest_and_leased_checkpoints(s3_tiers: Tiers) -> None:
    with CheckpointManager(s3_tiers) as mgr:
        for step in range(1, 7):
            mgr.save(step, state(step, mib=1)).wait(60)
    orphan = s3_tiers.layout.data("step-00000006", "orphan")  # a saver died before journaling
    s3_tiers.region.create_upload(orphan)
    with s3_tiers.lease("step-00000001"):  # somebody is restoring it right now
        rep = gc(s3_tiers)
    assert rep.aborted_uploads == [f"us-east:{orphan}"]
    assert s3_tiers.region.list_uploads(s3_tiers.layout.prefix + "/") == []
    assert "us-east:step-00000001" in rep.skipped_leased
    assert s3_tiers.committed_ids(s3_tiers.region) == [
        "step-00000001", "step-00000004", "step-00000005", "step-00000006"]
    assert s3_tiers.committed_ids(s3_tiers.local) == [
        "step-00000001", "step-00000005", "step-00000006"]
    assert s3_tiers.committed_ids(s3_tiers.archive) == ["step-00000004", "step-00000006"]
    assert s3_tiers.region.list(s3_tiers.layout.ckpt_prefix("step-00000002")) == []
    with pytest.raises(UnknownCheckpoint):
        Restorer(s3_tiers).restore("step-00000003")
    assert Restorer(s3_tiers).restore("latest").id == "step-00000006"
