"""Multi-rank saves as rules (checkpoint/multinode.py) on directory tiers, no processes: a
tier's manifest is committed only once every rank's part of this save is there, a record of
another save never counts, and the coordinator's wait is bounded. The same code with real
PyTorch ranks and SeaweedFS: test_multinode.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackscale.checkpoint import Tiers, parse_config
from rackscale.checkpoint import multinode as mn
from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.hashing import DEFAULT_ALGO, chunk_hashes, combine
from rackscale.checkpoint.manifest import ItemEntry, Manifest, parse_latest
from rackscale.checkpoint.multinode import (
    PartCommit,
    SavePart,
    build_manifest,
    local_part,
    local_part_steps,
    part_key,
)

CS = 4096
ID = "step-00000007"
STATES = {"us-east": 1.0}


def _tiers(tmp: Path) -> Tiers:
    return Tiers(parse_config({"local_dir": str(tmp / "local"),
                               "region": {"name": "us-east", "kind": "dir",
                                          "path": str(tmp / "east")},
                               "chunk_size": CS, "fsync": False}))


def _item(name: str, data: bytes) -> ItemEntry:
    chunks = chunk_hashes(data, CS, DEFAULT_ALGO)
    return ItemEntry(name=name, size=len(data), chunks=chunks, hash=combine(chunks, DEFAULT_ALGO))


def _share(*names: str, step: int = 7, uuid: str = "save-1") -> Manifest:
    """One rank's own files as a manifest (what the saver hands its committer)."""
    return build_manifest(ckpt_id=ID, step=step, save_uuid=uuid, algo=DEFAULT_ALGO,
                          chunk_size=CS, items=[_item(n, n.encode()) for n in names],
                          created_at=100.0, job=None)


def _rank(tiers: Tiers, rank: int, world: int, uuid: str = "save-1") -> PartCommit:
    return PartCommit(tiers, SavePart(rank=rank, world=world, save_uuid=uuid,
                                      created_at=100.0 + rank))


def test_a_rank_outside_the_world_is_refused() -> None:
    for rank, world in ((2, 2), (5, 2), (-1, 2), (0, 0)):
        with pytest.raises(CheckpointError, match=f"rank {rank} outside world size {world}"):
            SavePart(rank=rank, world=world, save_uuid="u", created_at=0.0)
    assert SavePart(rank=1, world=2, save_uuid="u", created_at=0.0).rank == 1


def test_rank_0_coordinates_and_the_other_ranks_tag_their_catalog_entries() -> None:
    parts = [SavePart(rank=r, world=12, save_uuid="u", created_at=1.5) for r in (0, 1, 11)]
    assert [(p.tag, p.coordinator) for p in parts] == [("", True), ("@r1", False),
                                                      ("@r11", False)]
    assert SavePart.from_dict(parts[2].as_dict()) == parts[2]
    assert parts[2].as_dict() == {"rank": 11, "world": 12, "save_uuid": "u", "created_at": 1.5}


def test_a_save_part_is_immutable() -> None:
    part = SavePart(rank=1, world=2, save_uuid="u", created_at=0.0)
    with pytest.raises(AttributeError):
        part.rank = 0  # type: ignore[misc]


def test_part_records_are_named_by_rank_under_the_checkpoint(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    assert part_key(tiers, ID, 3) == f"{tiers.layout.prefix}/{ID}/parts/rank-00003.json"


def test_the_manifest_is_committed_only_once_every_ranks_part_is_in_the_tier(
        tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    store = tiers.region
    c0, c1, c2 = (_rank(tiers, r, 3) for r in range(3))
    assert c2.commit(store, _share("z.bin"), STATES) is False
    assert c0.commit(store, _share("b.bin", "a.bin"), STATES) is False
    assert tiers.read_manifest(store, ID) is None and c0.full is None
    assert c0.missing(store, ID) == [1]
    assert c1.commit(store, _share("c.bin"), STATES) is True  # the last one commits
    m = tiers.read_manifest(store, ID)
    assert m is not None and [i.name for i in m.items] == ["a.bin", "b.bin", "c.bin", "z.bin"]
    assert (m.save_uuid, m.step, m.created_at, m.tier, m.states) == ("save-1", 7, 101.0,
                                                                     "us-east", STATES)
    assert c1.full is not None and c1.full.hash == m.hash
    assert parse_latest(store.get(tiers.layout.latest)).id == ID
    assert c0.missing(store, ID) == []
    # A rank that commits after the manifest is there adopts it.
    assert c0.commit(store, _share("b.bin", "a.bin"), STATES) is True
    assert c0.full is not None and c0.full.hash == m.hash


def test_a_part_record_holds_the_ranks_items_and_its_save(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    _rank(tiers, 1, 2).commit(tiers.region, _share("x.bin"), STATES)
    rec = json.loads(tiers.region.get(part_key(tiers, ID, 1)))
    assert {k: rec[k] for k in ("version", "id", "step", "rank", "world", "save_uuid",
                                "created_at", "algo", "chunk_size")} == {
        "version": 1, "id": ID, "step": 7, "rank": 1, "world": 2, "save_uuid": "save-1",
        "created_at": 101.0, "algo": DEFAULT_ALGO, "chunk_size": CS}
    assert [i["name"] for i in rec["items"]] == ["x.bin"]


@pytest.mark.parametrize("old", ["a-old", "z-old"])  # sorting before and after "save-1"
def test_records_of_another_save_or_of_a_rank_outside_the_world_never_count(
        tmp_path: Path, old: str) -> None:
    tiers = _tiers(tmp_path)
    store = tiers.region
    # An earlier attempt of the same id at world 3 (another uuid) left ranks 0-2.
    for r in range(3):
        _rank(tiers, r, 3, uuid=old).commit(store, _share(f"old{r}", uuid=old), STATES)
    store.delete(tiers.layout.manifest(ID))  # as if its commit never landed
    # A record naming rank 2 of this save, though the world is now 2.
    rec = json.loads(store.get(part_key(tiers, ID, 0))) | {"save_uuid": "save-1", "rank": 2}
    store.delete(part_key(tiers, ID, 2))
    store.put(part_key(tiers, ID, 2), json.dumps(rec).encode())
    store.put(part_key(tiers, ID, 3), json.dumps(rec | {"rank": 3}).encode())
    c0, c1 = _rank(tiers, 0, 2), _rank(tiers, 1, 2)
    assert c0.commit(store, _share("a.bin"), STATES) is False
    assert c0.missing(store, ID) == [1]
    assert c1.commit(store, _share("b.bin"), STATES) is True
    m = tiers.read_manifest(store, ID)
    assert m is not None and [i.name for i in m.items] == ["a.bin", "b.bin"]


@pytest.mark.parametrize("other", ["a-other", "z-other"])  # before and after "save-1"
def test_a_checkpoint_committed_by_another_save_is_never_added_to(tmp_path: Path,
                                                                   other: str) -> None:
    tiers = _tiers(tmp_path)
    store = tiers.region
    assert _rank(tiers, 0, 1, uuid=other).commit(store, _share("a", uuid=other), STATES)
    with pytest.raises(CheckpointError, match="committed by another save; refusing to add "
                                              "rank 0's files"):
        _rank(tiers, 0, 1).commit(store, _share("a"), STATES)


def test_two_ranks_writing_the_same_file_name_is_an_error(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    _rank(tiers, 0, 2).commit(tiers.region, _share("same.bin"), STATES)
    with pytest.raises(CheckpointError, match="two ranks wrote the same file name"):
        _rank(tiers, 1, 2).commit(tiers.region, _share("same.bin"), STATES)


class _Clock:
    """monotonic() and sleep() of a virtual clock: the wait's pacing without waiting."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        if s < 0:
            raise ValueError("sleep length must be non-negative")
        self.sleeps.append(round(s, 6))
        self.now += s


def test_the_coordinator_waits_with_a_doubling_poll_capped_at_a_second_until_its_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiers = _tiers(tmp_path)
    clock = _Clock()
    monkeypatch.setattr(mn, "time", clock)
    c0 = _rank(tiers, 0, 2)
    c0.commit(tiers.region, _share("a.bin"), STATES)
    assert c0.await_complete(tiers.region, _share("a.bin"), STATES, timeout_s=5.0) is False
    assert clock.sleeps == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 0.45]


def test_the_coordinators_wait_ends_when_the_set_completes_or_another_rank_committed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tiers = _tiers(tmp_path)
    clock = _Clock()
    monkeypatch.setattr(mn, "time", clock)
    c0, c1 = _rank(tiers, 0, 2), _rank(tiers, 1, 2)
    c0.commit(tiers.region, _share("a.bin"), STATES)
    c1.commit(tiers.local, _share("b.bin"), STATES)  # rank 1's part is elsewhere only
    real_sleep = clock.sleep

    def sleep_then_rank_1_commits(s: float) -> None:
        real_sleep(s)
        if len(clock.sleeps) == 2:
            c1.commit(tiers.region, _share("b.bin"), STATES)

    clock.sleep = sleep_then_rank_1_commits  # type: ignore[method-assign]
    assert c0.await_complete(tiers.region, _share("a.bin"), STATES, timeout_s=5.0) is True
    assert clock.sleeps == [0.05, 0.1]  # rank 1's record completed the set, rank 1 committed
    assert c0.full is not None and [i.name for i in c0.full.items] == ["a.bin", "b.bin"]
    # Rank 1's record lands but rank 1 never commits (it died after writing it): the
    # coordinator's own poll finds the set complete and commits.
    tiers = _tiers(tmp_path / "again")
    c0, c1 = _rank(tiers, 0, 2), _rank(tiers, 1, 2)
    c0.commit(tiers.region, _share("a.bin"), STATES)
    c1.commit(tiers.local, _share("b.bin"), STATES)
    clock.sleeps.clear()

    def sleep_then_rank_1s_record_lands(s: float) -> None:
        real_sleep(s)
        if len(clock.sleeps) == 3:
            tiers.region.put(part_key(tiers, ID, 1), tiers.local.get(part_key(tiers, ID, 1)))

    clock.sleep = sleep_then_rank_1s_record_lands  # type: ignore[method-assign]
    assert c0.await_complete(tiers.region, _share("a.bin"), STATES, timeout_s=5.0) is True
    assert clock.sleeps == [0.05, 0.1, 0.2] and c1.full is None
    m = tiers.read_manifest(tiers.region, ID)
    assert m is not None and [i.name for i in m.items] == ["a.bin", "b.bin"]
    # Already committed: the wait adopts the manifest at once.
    assert c0.await_complete(tiers.region, _share("a.bin"), STATES, timeout_s=5.0) is True
    assert clock.sleeps == [0.05, 0.1, 0.2]  # no sleep more


def test_a_record_removed_between_the_listing_and_its_read_is_skipped(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    region = tiers.region
    c0, c1 = _rank(tiers, 0, 2), _rank(tiers, 1, 2)
    c0.commit(region, _share("a.bin"), STATES)

    class Racing:  # lists a record of rank 1 that is deleted before it is read
        name = region.name

        def __getattr__(self, attr: str):
            return getattr(region, attr)

        def list(self, prefix: str) -> list[str]:
            return sorted({*region.list(prefix), part_key(tiers, ID, 1)})

    assert c0.missing(Racing(), ID) == [1]  # type: ignore[arg-type]
    assert c1.commit(region, _share("b.bin"), STATES) is True


def test_while_the_set_cannot_be_complete_a_poll_is_one_listing_and_no_read(
        tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    region = tiers.region
    gets: list[str] = []

    class Counting:
        name = region.name

        def __getattr__(self, attr: str):
            return getattr(region, attr)

        def get(self, key: str, *a: object) -> bytes:
            gets.append(key)
            return region.get(key, *a)  # type: ignore[arg-type]

    c0 = _rank(tiers, 0, 3)
    c0.commit(region, _share("a.bin"), STATES)
    _rank(tiers, 1, 3).commit(region, _share("b.bin"), STATES)
    assert c0.try_complete(Counting(), _share("a.bin"), STATES) is False  # type: ignore[arg-type]
    assert gets == []


def test_the_wait_ends_once_past_its_deadline_though_no_poll_lands_on_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Drifting(_Clock):  # each reading of the clock costs a millisecond
        def monotonic(self) -> float:
            self.now += 0.001
            assert len(self.sleeps) < 100, "the wait did not stop at its deadline"
            return self.now

    tiers = _tiers(tmp_path)
    clock = Drifting()
    monkeypatch.setattr(mn, "time", clock)
    c0 = _rank(tiers, 0, 2)
    c0.commit(tiers.region, _share("a.bin"), STATES)
    assert c0.await_complete(tiers.region, _share("a.bin"), STATES, timeout_s=0.5) is False
    assert clock.now >= 0.5 and len(clock.sleeps) == 4


def test_a_ranks_own_share_is_read_back_from_its_local_record(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    part = SavePart(rank=1, world=2, save_uuid="save-1", created_at=5.0)
    assert local_part(tiers, ID, part) is None
    PartCommit(tiers, part).commit(tiers.local, _share("y.bin", "x.bin"), STATES)
    m = local_part(tiers, ID, part)
    assert m is not None and (m.step, m.save_uuid, m.created_at) == (7, "save-1", 5.0)
    assert [i.name for i in m.items] == ["x.bin", "y.bin"]
    for uuid in ("save-0", "save-2"):  # the record is another save's
        other = SavePart(rank=1, world=2, save_uuid=uuid, created_at=5.0)
        assert local_part(tiers, ID, other) is None, uuid


def test_the_steps_of_the_checkpoints_a_node_holds_parts_of(tmp_path: Path) -> None:
    tiers = _tiers(tmp_path)
    local, pre = tiers.local, tiers.layout.prefix
    PartCommit(tiers, SavePart(rank=1, world=2, save_uuid="u", created_at=0.0)).commit(
        local, _share("a"), STATES)
    local.put(f"{pre}/step-00000009/parts/rank-00000.json", b"not json")
    local.put(f"{pre}/step-00000011/parts/rank-00000.json", json.dumps({"step": 11}).encode())
    local.put(f"{pre}/step-00000012/parts/notes.json", json.dumps({"step": 12}).encode())
    local.put(f"{pre}/step-00000013/data/rank-00000.json", json.dumps({"step": 13}).encode())
    local.put(f"{pre}/step-00000014/parts/x/rank-0.json", json.dumps({"step": 14}).encode())
    local.put(f"{pre}/latest", b"{}")  # keys of other lengths: the latest pointer
    local.put(f"{pre}/step-00000015/parts", b"{}")
    local.put(f"{pre}/step-00000016/zparts/rank-00000.json", json.dumps({"step": 16}).encode())
    assert local_part_steps(tiers) == {ID: 7, "step-00000009": -1, "step-00000011": 11}
