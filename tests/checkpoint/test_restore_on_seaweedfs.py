"""Two restore rules on real S3 (two SeaweedFS regions), as an operator meets them: one
region's `latest` pointer naming no checkpoint is outvoted, and an object deleted from the
region is served by the replica, said, and copied back. The same rules run on directory
tiers in test_restore_rules.py (fast, for mutation testing); this is the S3 path."""

from __future__ import annotations

import shutil
from pathlib import Path

from rackscale.checkpoint import CheckpointManager, Restorer, Tiers, listing_rows, parse_config
from rackscale.checkpoint.seaweed import SeaweedFS

from .conftest import s3_config

BLOB = bytes(range(256)) * 48 * 1024  # 12 MiB: several chunks, more than one upload part


def _saved(tmp: Path, regions: tuple[SeaweedFS, SeaweedFS], *steps: int) -> Tiers:
    cfg = parse_config(s3_config(tmp, *regions))
    with CheckpointManager(cfg) as mgr:
        for step in steps:
            assert mgr.save(step, {"blob": BLOB, "n": bytes([step])}).wait(60).errors == {}
    return Tiers(cfg)


def test_a_latest_pointer_naming_no_checkpoint_is_outvoted_on_s3(
        tmp_path: Path, regions: tuple[SeaweedFS, SeaweedFS]) -> None:
    tiers = _saved(tmp_path, regions, 1, 2)
    tiers.region.delete(tiers.layout.latest)
    tiers.region.put(tiers.layout.latest, b'{"id": ".."}')
    r = Restorer(tiers)
    assert r.resolve_id("latest") == "step-00000002"
    assert list(r.bad_latest) == ["us-east"]
    report = Restorer(tiers).restore("latest")
    assert report.id == "step-00000002" and list(report.bad_latest) == ["us-east"]


def test_an_object_deleted_from_the_region_is_served_by_the_replica_and_copied_back(
        tmp_path: Path, regions: tuple[SeaweedFS, SeaweedFS]) -> None:
    tiers = _saved(tmp_path, regions, 1)
    ckpt = "step-00000001"
    key = tiers.layout.data(ckpt, "blob")
    tiers.region.delete(key)
    shutil.rmtree(tiers.local.root)  # a new node: nothing cached
    fresh = Tiers(tiers.cfg)
    rows = listing_rows(fresh, Restorer(fresh), [])
    assert rows[0]["tiers"]["us-east"] == "missing" and rows[0]["tiers"]["us-west"] == "yes"
    report = Restorer(fresh).restore(ckpt)
    assert report.missing == [{"tier": "us-east", "item": "blob"}]
    assert report.repaired == ["us-east:blob"]
    assert tiers.region.get(key) == BLOB
    assert Restorer(fresh).verify(ckpt, fresh.region)["ok"]
