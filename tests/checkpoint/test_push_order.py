"""The replicas' data is sent beside the region's, but a replica's manifest is committed only
after the region's (the state order: region, then replicated); a failed early send to a
replica is sent again by the replica's own push."""

from __future__ import annotations

import threading
from pathlib import Path

from rackscale.checkpoint import (
    CheckpointManager,
    Restorer,
    StoreUnreachable,
    Tiers,
    parse_config,
)


def cfg(tmp: Path) -> dict:
    return {"local_dir": str(tmp / "local"),
            "region": {"name": "us-east", "kind": "dir", "path": str(tmp / "east")},
            "replicas": [{"name": "us-west", "kind": "dir", "path": str(tmp / "west")}],
            "chunk_size": 4096, "part_size": 8192, "fsync": False}


def test_replica_data_goes_out_while_the_region_upload_runs(tmp_path: Path) -> None:
    log: list[tuple[str, str]] = []
    replica_started = threading.Event()
    mgr = CheckpointManager(parse_config(cfg(tmp_path)),
                            events=lambda kind, d: log.append((kind, d.get("tier", ""))))
    region, west = mgr.tiers.region, mgr.tiers.replicas[0]
    put_region, put_west = region.put_file, west.put_file

    def slow_region(key: str, src: Path) -> str:
        # Waits (bounded) for the replica's first data: it starts only if sent alongside.
        log.append(("region.data", "us-east"))
        replica_started.wait(20)
        return put_region(key, src)

    def record_west(key: str, src: Path) -> str:
        log.append(("replica.data", "us-west"))
        replica_started.set()
        return put_west(key, src)

    region.put_file, west.put_file = slow_region, record_west
    with mgr:
        rep = mgr.save(1, {"a": b"x" * 20_000, "b": b"y" * 100}).wait(60)
    assert rep.errors == {} and "replicated" in rep.states
    assert replica_started.is_set()
    first_west = log.index(("replica.data", "us-west"))
    east_commit = log.index(("manifest.commit", "us-east"))
    west_commit = log.index(("manifest.commit", "us-west"))
    assert first_west < east_commit < west_commit
    assert rep.states["region"] <= rep.states["replicated"]
    tiers = Tiers(parse_config(cfg(tmp_path)))
    for store in (tiers.region, tiers.replicas[0]):
        assert Restorer(tiers).verify("step-00000001", store)["status"] == "ok"


def test_a_failed_early_send_to_a_replica_is_sent_again(tmp_path: Path) -> None:
    mgr = CheckpointManager(parse_config(cfg(tmp_path)))
    west = mgr.tiers.replicas[0]
    put_west, calls = west.put_file, []

    def flaky(key: str, src: Path) -> str:
        calls.append(key)
        if len(calls) == 1:
            raise StoreUnreachable("us-west: connection reset (once)")
        return put_west(key, src)

    west.put_file = flaky
    with mgr:
        rep = mgr.save(1, {"a": b"x" * 20_000}).wait(60)
    assert rep.errors == {} and "replicated" in rep.states
    assert len(calls) == 2  # the early send failed, the replica's own push sent it
    tiers = Tiers(parse_config(cfg(tmp_path)))
    assert Restorer(tiers).verify("step-00000001", tiers.replicas[0])["status"] == "ok"
