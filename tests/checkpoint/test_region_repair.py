"""An object deleted from the region tier is copied back on the next restore, whichever tier
served it (the local cache, a replica): the region is the copy every node restores from."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rackscale.checkpoint import CheckpointManager, Restorer, Tiers, default_config, parse_config
from tests.checkpoint.conftest import s3_config


def _saved(cfg) -> Tiers:
    with CheckpointManager(cfg) as mgr:
        mgr.save(1, {"w": np.arange(50_000, dtype=np.float32),
                     "b": np.ones(300, dtype=np.float32)}).wait(30)
    return Tiers(cfg)


def _delete_in_region_and_restore(tiers: Tiers, drop_cache: bool) -> dict:
    ckpt = "step-00000001"
    key = tiers.layout.data(ckpt, "w")
    tiers.region.delete(key)
    assert tiers.region.head(key) is None
    if drop_cache:
        shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(ckpt)))
    report = Restorer(Tiers(tiers.cfg)).restore(ckpt)
    info = tiers.region.head(key)
    assert info is not None and info.size == 50_000 * 4, "the region's object is back"
    verified = Restorer(Tiers(tiers.cfg)).verify(ckpt, tiers.region)
    assert verified["status"] == "ok", verified
    return report.as_dict()


@pytest.mark.parametrize("drop_cache", [False, True], ids=["served-by-local",
                                                           "served-by-replica"])
def test_on_the_directory_default(tmp_path: Path, monkeypatch, drop_cache: bool) -> None:
    monkeypatch.chdir(tmp_path)
    got = _delete_in_region_and_restore(_saved(default_config("data")), drop_cache)
    region = default_config("data").region.name
    assert got["missing"] == [{"tier": region, "item": "w"}]
    assert got["repaired"] == [f"{region}:w"]


def test_on_seaweedfs(tmp_path: Path, regions: tuple) -> None:
    tiers = _saved(parse_config(s3_config(tmp_path, *regions)))
    got = _delete_in_region_and_restore(tiers, drop_cache=False)
    assert got["repaired"] == ["us-east:w"]


def test_a_region_holding_no_copy_of_the_save_is_not_written(tmp_path: Path,
                                                             monkeypatch) -> None:
    """A region that never committed the save (no manifest there) has nothing missing: the
    restore leaves it as it is."""
    monkeypatch.chdir(tmp_path)
    tiers = _saved(default_config("data"))
    shutil.rmtree(tiers.region.path(tiers.layout.ckpt_prefix("step-00000001")))
    got = Restorer(Tiers(tiers.cfg)).restore("step-00000001").as_dict()
    assert got["repaired"] == [] and got["missing"] == []
    assert tiers.region.list(tiers.layout.ckpt_prefix("step-00000001")) == []
