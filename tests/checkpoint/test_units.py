"""Unit tests: state table, config validation, both ObjectStores' write-once and multipart."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.checkpoint import (
    AlreadyExists,
    CheckpointError,
    ConfigError,
    LocalDirStore,
    ObjectMissing,
    parse_config,
)
from rackscale.checkpoint.manifest import CkptState, advance, current_state


def test_state_table_allows_only_forward_steps() -> None:
    states: dict[str, float] = {}
    for s in (CkptState.STAGED, CkptState.LOCAL, CkptState.REGION, CkptState.ARCHIVED):
        advance(states, s)
    assert current_state(states) is CkptState.ARCHIVED
    with pytest.raises(CheckpointError, match="illegal"):
        advance({"staged": 1.0}, CkptState.REGION)


def test_config_errors_name_the_field_and_fix() -> None:
    base = {"local_dir": "/tmp/x", "region": {"name": "r", "kind": "dir", "path": "/tmp/r"}}
    assert parse_config(base).backpressure == "wait"
    with pytest.raises(ConfigError, match="backpressure"):
        parse_config(base | {"backpressure": "maybe"})
    with pytest.raises(ConfigError, match="needs `endpoint`"):
        parse_config(base | {"region": {"name": "r", "kind": "s3"}})
    with pytest.raises(ConfigError, match="unique"):
        parse_config(base | {"replicas": [base["region"]]})


def _contract(store) -> None:
    store.put("a/b", b"hello")
    assert store.get("a/b", 1, 3) == b"el" and store.head("a/b").size == 5
    store.put("w/m", b"one", if_absent=True)
    with pytest.raises(AlreadyExists):
        store.put("w/m", b"two", if_absent=True)
    assert store.get("w/m") == b"one"
    with pytest.raises(ObjectMissing):
        store.get("nope/x")
    part = max(store.min_part_size, 16)
    up = store.create_upload("mp/obj")
    e1 = store.upload_part("mp/obj", up, 1, b"x" * part)
    assert store.list_parts("mp/obj", up) == {1: e1}  # what a restarted saver asks
    e2 = store.upload_part("mp/obj", up, 2, b"yz")
    store.complete_upload("mp/obj", up, {1: e1, 2: e2})
    assert store.get("mp/obj", part - 1) == b"xyz"
    assert store.list("mp/") == ["mp/obj"] and store.list_uploads("mp/") == []


def test_local_dir_store_contract(tmp_path: Path) -> None:
    _contract(LocalDirStore(tmp_path))
    with pytest.raises(CheckpointError, match="invalid object key"):
        LocalDirStore(tmp_path).put("../escape", b"x")


def test_s3_store_contract_on_seaweedfs(regions: tuple) -> None:
    _contract(regions[0].store("contract"))


def test_demo_step_saves_through_every_tier_and_restores_cold(tmp_path: Path) -> None:
    from rackscale.checkpoint.demo import demo_checkpoint
    lines: list[str] = []
    out = demo_checkpoint(tmp_path, lines.append)
    assert out.ok and out.restore.tier == "us-east"
    assert "archived" in out.saves[1].states
    assert out.as_dict()["restore"]["tier"] == "us-east"  # the report's checkpoint.json
    assert any("served by us-east" in line for line in lines)
