"""`local_cache: false`: a job's restore (the DCP reader) reads every chunk from the region,
never from the node's cache, and leaves no private copy behind; the option is typed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from rackscale.checkpoint import ConfigError, TiersConfig, parse_config
from rackscale.checkpoint.dcp import UNCACHED, TieredStorageReader, TieredStorageWriter


def config(tmp: Path, **over: object) -> TiersConfig:
    return parse_config({"local_dir": str(tmp / "local"),
                         "region": {"name": "region", "kind": "dir", "path": str(tmp / "region")},
                         "chunk_size": 4096, "part_size": 8192, **over})


def saved(tmp: Path) -> dict[str, torch.Tensor]:
    state = {"w": torch.arange(5000, dtype=torch.float32), "b": torch.ones(3)}
    dcp.save(state, storage_writer=TieredStorageWriter(config(tmp), 1))
    return state


def load(cfg: TiersConfig) -> tuple[dict[str, torch.Tensor], TieredStorageReader]:
    got = {"w": torch.zeros(5000), "b": torch.zeros(3)}
    reader = TieredStorageReader(cfg, "latest")
    dcp.load(got, storage_reader=reader)
    return got, reader


def test_cache_on_serves_the_restore_from_the_nodes_cache(tmp_path: Path) -> None:
    want = saved(tmp_path)
    got, reader = load(config(tmp_path))
    assert set(reader.restore_report.served_by) == {"local"}
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_cache_off_reads_every_chunk_from_the_region(tmp_path: Path) -> None:
    want = saved(tmp_path)
    got, reader = load(config(tmp_path, local_cache=False))
    assert set(reader.restore_report.served_by) == {"region"}
    assert all(torch.equal(got[k], want[k]) for k in want)
    # the private copy is gone once read; the node's cache is as the save left it
    assert not any((tmp_path / "local" / UNCACHED).iterdir())
    assert (tmp_path / "local" / "cache").is_dir()


def test_a_dead_process_private_copy_is_removed(tmp_path: Path) -> None:
    saved(tmp_path)
    left = tmp_path / "local" / UNCACHED / "999999999-gone"
    left.mkdir(parents=True)
    load(config(tmp_path, local_cache=False))
    assert not left.exists()


@pytest.mark.parametrize("value", ["false", "no", 0])
def test_local_cache_takes_only_a_boolean(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match="local_cache"):
        config(tmp_path, local_cache=value)
