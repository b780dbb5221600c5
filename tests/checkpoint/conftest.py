"""Fixtures: two real SeaweedFS instances (two regions) for the session, and tier configs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from rackscale.checkpoint import Tiers, parse_config
from rackscale.checkpoint.seaweed import SeaweedFS


@pytest.fixture(scope="session")
def regions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SeaweedFS, SeaweedFS]]:
    east = SeaweedFS(tmp_path_factory.mktemp("weed-east"), name="us-east").start()
    try:
        west = SeaweedFS(tmp_path_factory.mktemp("weed-west"), name="us-west").start()
    except Exception:
        east.stop()
        raise
    yield east, west
    east.stop()
    west.stop()


def s3_config(tmp: Path, east: SeaweedFS, west: SeaweedFS, **over: object) -> dict:
    """A tiers config on fresh buckets: region us-east, replica us-west, archive on us-east."""
    tag = uuid.uuid4().hex[:8]
    for w, b in ((east, f"ck-{tag}"), (west, f"ck-{tag}"), (east, f"arch-{tag}")):
        w.store(b)
    cfg = {
        "local_dir": str(tmp / "local"),
        "region": east.spec(f"ck-{tag}"),
        "replicas": [west.spec(f"ck-{tag}")],
        "archive": east.spec(f"arch-{tag}", name="archive"),
        "chunk_size": 1 << 20, "part_size": 5 << 20, "upload_parallelism": 4,
        "retention": {"keep_local": 2, "keep_region": 3, "archive_every": 2,
                      "keep_archived": 2},
    }
    cfg.update(over)
    return cfg


@pytest.fixture()
def s3_tiers(tmp_path: Path, regions: tuple[SeaweedFS, SeaweedFS]) -> Tiers:
    return Tiers(parse_config(s3_config(tmp_path, *regions)))
