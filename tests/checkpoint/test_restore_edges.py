"""Restore decisions the rule tests leave open, on real directory tiers: a local chunk damaged in
place, an unreadable local manifest, the words of a damaged-copy report, load_state, and verify
of a tier that does not answer."""

from __future__ import annotations

import json
from pathlib import Path

from rackscale.checkpoint import Restorer, RestoreReport, Tiers

from .test_restore_rules import BLOB, CS, ck, dir_cfg, rewrite, save


def test_a_local_chunk_damaged_in_place_is_fetched_again_not_trusted(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    obj = tiers.local.path(tiers.layout.data(ck(1), "blob"))
    raw = bytearray(obj.read_bytes())
    raw[CS + 7] ^= 0xFF  # chunk 1 of the local copy; the file keeps its size
    obj.write_bytes(bytes(raw))
    m = tiers.read_manifest(tiers.local, ck(1))
    chunks = sum(len(it.chunks) for it in m.items)
    rep = Restorer(tiers).restore(ck(1))
    # every other chunk is good locally; the damaged one comes from the region
    assert rep.served_by == {"local": chunks - 1, "us-east": 1}
    assert rep.bad_chunks == [{"tier": "local", "item": "blob", "chunk": 1}]
    assert rep.tier == "local"
    assert obj.read_bytes() == BLOB
    assert rep.bytes == m.total_bytes == sum(it.size for it in m.items)


def test_an_unreadable_local_manifest_is_quarantined_by_restore_only(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.manifest(ck(1))
    tiers.local.delete(key)
    tiers.local.put(key, b'{"id": "step-00000001", "trunc', if_absent=True)
    looked = Restorer(tiers)
    _, src, stale = looked.manifest(ck(1))
    assert (src, stale) == ("us-east", False)
    assert looked.quarantined == []  # read-only: only skipped
    rep = Restorer(tiers).restore(ck(1))
    assert (rep.manifest_from, rep.stale_cache_dropped) == ("us-east", False)
    assert len(rep.quarantined) == 1
    moved = Path(rep.quarantined[0])
    assert moved.parent == tiers.root / "quarantine"
    assert (moved / "manifest.json").read_bytes().endswith(b'"trunc')
    # the restored local copy is whole again and serves the next restore
    again = Restorer(tiers).restore(ck(1))
    assert (again.manifest_from, again.stale_cache_dropped, again.quarantined) == (
        "local", False, [])


def test_a_damaged_local_copy_is_reported_with_both_hashes(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    region = json.loads(tiers.region.get(tiers.layout.manifest(ck(1))))
    local = rewrite(tiers.local, tiers, ck(1), created_at=1.0)
    r = Restorer(tiers)
    r.manifest(ck(1))
    assert r.bad_manifests[ck(1)]["local"] == (
        f"local manifest of {ck(1)} has hash {local.hash[:16]} but us-east has "
        f"{region['hash'][:16]} for the same save")


def test_load_state_returns_every_item_by_its_key(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1, 2)
    state, rep = Restorer(tiers).load_state("latest")
    assert rep.id == ck(2)
    assert state["blob"] == BLOB and state["n"] == bytes([2])


def test_verify_of_a_tier_that_does_not_answer_says_unreachable(tmp_path: Path) -> None:
    from rackscale.checkpoint.seaweed import free_port

    cfg = dir_cfg(tmp_path)
    save(cfg, 1)
    dead = {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:{free_port()}",
            "bucket": "b-dead", "access_key": "k", "secret_key": "s", "timeout_s": 1.0}
    tiers = Tiers(dir_cfg(tmp_path, region=dead, replicas=[]))
    out = Restorer(tiers).verify(ck(1), tiers.region)
    assert (out["status"], out["ok"], out["tier"]) == ("unreachable", False, "us-east")
    assert "does not answer" in out["error"]


def test_a_new_report_has_moved_nothing():
    rep = RestoreReport(id="x", manifest_from="local")
    d = rep.as_dict()
    assert (d["bytes"], d["seconds"], d["served_by"], d["tier"]) == (0, 0.0, {}, "-")
    assert d["stale_cache_dropped"] is False
