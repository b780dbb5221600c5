"""The restorer's decisions on real directory tiers: which `latest` wins, which manifest is
served and what happens to the local copy, which tier serves a chunk, what verify says.

Each test asserts the decision and the evidence the report carries (tiers, items, chunk
numbers, sizes), so a changed comparison or constant in restore.py fails here.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from rackscale.checkpoint import (
    CheckpointManager,
    Restorer,
    RestoreReport,
    StoreUnreachable,
    Tiers,
    TiersConfig,
    UnknownCheckpoint,
    parse_config,
)
from rackscale.checkpoint.errors import IntegrityError, ManifestInvalid, ObjectMissing
from rackscale.checkpoint.manifest import ItemEntry, Manifest, checkpoint_hash
from rackscale.checkpoint.seaweed import free_port

CS = 4096
BLOB = bytes(range(256)) * 48  # 12288 B = 3 chunks


def dir_cfg(tmp: Path, **over) -> TiersConfig:
    cfg = {"local_dir": str(tmp / "local"),
           "region": {"name": "us-east", "kind": "dir", "path": str(tmp / "east")},
           "replicas": [{"name": "us-west", "kind": "dir", "path": str(tmp / "west")}],
           "chunk_size": CS, "part_size": 2 * CS, "fsync": False}
    return parse_config(cfg | over)


def save(cfg: TiersConfig, *steps: int) -> Tiers:
    with CheckpointManager(cfg) as mgr:
        for step in steps:
            state = {"blob": BLOB, "n": bytes([step]), "z": b""}  # z: an empty item
            assert mgr.save(step, state).wait(30).errors == {}
    return Tiers(cfg)


def ck(step: int) -> str:
    return f"step-{step:08d}"


def rewrite(store, tiers: Tiers, ckpt_id: str, **fields) -> Manifest:
    """Put a self-consistent manifest with `fields` changed (hash recomputed) in `store`."""
    key = tiers.layout.manifest(ckpt_id)
    raw = json.loads(store.get(key)) | fields
    items = [ItemEntry(**i) for i in raw["items"]]
    m = Manifest(**(raw | {"items": items}))
    m.hash = checkpoint_hash(m)
    store.delete(key)
    store.put(key, m.to_json(), if_absent=True)
    return m


def test_report_tier_is_the_tier_that_served_most() -> None:
    rep = RestoreReport(id="x", manifest_from="us-east", served_by={"local": 2, "us-west": 3,
                                                                    "us-east": 1})
    assert rep.tier == "us-west" and rep.as_dict()["tier"] == "us-west"
    assert RestoreReport(id="x", manifest_from="-").tier == "-"


# --- latest ------------------------------------------------------------------------------------
def test_latest_is_the_highest_pointer_that_names_a_held_checkpoint(tmp_path: Path) -> None:
    cfg = dir_cfg(tmp_path)
    with pytest.raises(UnknownCheckpoint, match="'latest'"):
        Restorer(Tiers(cfg)).resolve_id("latest")
    tiers = save(cfg, 1, 2, 3)
    assert Restorer(tiers).resolve_id("step-00000002") == "step-00000002"  # ids pass through
    assert Restorer(tiers).resolve_id("latest") == ck(3)
    # One tier behind (its pointer at 2) loses to the others at 3, and says nothing bad.
    tiers.replicas[0].put(tiers.layout.latest, json.dumps({"id": ck(2), "step": 2}).encode())
    r = Restorer(tiers)
    assert r.resolve_id("latest") == ck(3) and r.bad_latest == {}
    # The newest pointer naming nothing is outvoted by the next one, and named.
    tiers.region.put(tiers.layout.latest, json.dumps({"id": ck(9), "step": 9}).encode())
    r = Restorer(tiers)
    assert r.resolve_id("latest") == ck(3)
    assert r.bad_latest == {"us-east": f"us-east: latest points at {ck(9)}, which no tier "
                                       f"holds"}
    # Without any pointer, the newest listed id.
    for s in tiers.all:
        s.delete(tiers.layout.latest)
    assert Restorer(tiers).resolve_id("latest") == ck(3)


def test_every_pointer_bad_falls_back_to_the_newest_id(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1, 2)
    for s in tiers.all:
        s.put(tiers.layout.latest, b"garbage")
    r = Restorer(tiers)
    assert r.resolve_id("latest") == ck(2)
    assert sorted(r.bad_latest) == ["local", "us-east", "us-west"]
    assert all("not valid JSON" in why for why in r.bad_latest.values())


# --- which manifest, and the local copy --------------------------------------------------------
def test_a_good_local_copy_of_the_same_save_is_served_locally(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    m, src, stale = Restorer(tiers).manifest(ck(1))
    assert (src, stale, m.tier) == ("local", False, "local")


@pytest.mark.parametrize("fix_cache", [False, True])
def test_a_local_copy_of_another_save_is_stale(tmp_path: Path, fix_cache: bool) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    for s in tiers.remote:
        rewrite(s, tiers, ck(1), save_uuid="f" * 32)
    r = Restorer(tiers)
    m, src, stale = r.manifest(ck(1), fix_cache=fix_cache)
    assert (src, stale, m.save_uuid) == ("us-east", True, "f" * 32)
    assert r.bad_manifests == {}  # stale is not damaged
    held = tiers.local.head(tiers.layout.manifest(ck(1))) is not None
    assert held is not fix_cache  # only restore drops it; ls/show/verify leave it
    assert tiers.local.path(tiers.layout.data(ck(1), "blob")).exists() is not fix_cache


@pytest.mark.parametrize("fix_cache", [False, True])
def test_a_local_copy_of_the_same_save_with_another_hash_is_damaged(tmp_path: Path,
                                                                    fix_cache: bool) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    rewrite(tiers.local, tiers, ck(1), created_at=1.0)
    r = Restorer(tiers)
    m, src, stale = r.manifest(ck(1), fix_cache=fix_cache)
    assert (src, stale, m.created_at != 1.0) == ("us-east", False, True)
    assert list(r.bad_manifests) == [ck(1)] and list(r.bad_manifests[ck(1)]) == ["local"]
    assert "for the same save" in r.bad_manifests[ck(1)]["local"]
    assert len(r.quarantined) == int(fix_cache)
    if fix_cache:
        moved = Path(r.quarantined[0])
        assert moved.parent == tiers.root / "quarantine" and moved.name.startswith(ck(1) + ".")
        assert json.loads((moved / "manifest.json").read_text())["created_at"] == 1.0
        assert (moved / "data" / "blob").read_bytes() == BLOB
        assert not tiers.local.path(tiers.layout.ckpt_prefix(ck(1))).exists()


def test_a_damaged_region_manifest_is_skipped_for_the_replica(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    tiers.local.delete(tiers.layout.manifest(ck(1)))
    tiers.region.path(tiers.layout.manifest(ck(1))).write_bytes(b"{}")
    r = Restorer(tiers)
    m, src, _ = r.manifest(ck(1))
    assert src == "us-west" and m.id == ck(1)
    assert list(r.bad_manifests[ck(1)]) == ["us-east"]
    assert "field `version` is missing" in r.bad_manifests[ck(1)]["us-east"]
    for s in tiers.replicas:
        s.path(tiers.layout.manifest(ck(1))).write_bytes(b"[]")
    r = Restorer(tiers)
    with pytest.raises(ManifestInvalid, match=r"no tier holds a manifest that checks out "
                                              r"\(us-east: .*; us-west: .*\)"):
        r.manifest(ck(1))


def test_offline_the_local_copy_serves_and_the_dead_tier_is_named(tmp_path: Path) -> None:
    cfg = dir_cfg(tmp_path)
    save(cfg, 1)
    dead = {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:{free_port()}",
            "bucket": "b-dead", "access_key": "k", "secret_key": "s", "timeout_s": 1.0}
    tiers = Tiers(dir_cfg(tmp_path, region=dead, replicas=[]))
    r = Restorer(tiers)
    _, src, _ = r.manifest(ck(1))
    assert src == "local" and list(r.unreachable) == ["us-east"]
    assert "does not answer" in r.unreachable["us-east"]
    empty = Tiers(dir_cfg(tmp_path / "other", region=dead, replicas=[]))
    with pytest.raises(StoreUnreachable, match="no remote tier answered"):
        Restorer(empty).manifest(ck(1))


# --- which tier serves a chunk ----------------------------------------------------------------
def test_a_bad_chunk_is_served_by_the_next_tier_and_repaired(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")
    tiers.local.delete(key)
    obj = tiers.region.path(key)
    raw = bytearray(obj.read_bytes())
    raw[CS + 5] ^= 0xFF  # chunk 1 of the region copy
    obj.write_bytes(bytes(raw))
    sent: list[int] = []  # the repair's part numbers (S3 numbers parts from 1)
    upload_part = tiers.region.upload_part
    tiers.region.upload_part = lambda k, u, n, data: (sent.append(n), upload_part(k, u, n,
                                                                              data))[1]
    rep = Restorer(tiers).restore(ck(1))
    assert rep.bad_chunks == [{"tier": "us-east", "item": "blob", "chunk": 1}]
    assert rep.served_by == {"local": 2, "us-east": 2, "us-west": 1}  # n and z still local
    assert rep.repaired == ["us-east:blob"] and rep.bad_sizes == []
    assert obj.read_bytes() == BLOB and tiers.local.path(key).read_bytes() == BLOB
    assert sorted(sent) == [1, 2]  # 12288 bytes in parts of 8192


def test_a_bad_local_chunk_is_refetched_and_the_cache_repaired_in_place(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    path = tiers.local.path(tiers.layout.data(ck(1), "blob"))
    raw = bytearray(path.read_bytes())
    raw[7] ^= 0x10
    path.write_bytes(bytes(raw))
    rep = Restorer(tiers).restore(ck(1))
    assert rep.bad_chunks == [{"tier": "local", "item": "blob", "chunk": 0}]
    assert rep.repaired == ["local:blob#0"] and rep.manifest_from == "local"
    assert rep.served_by == {"local": 4, "us-east": 1} and rep.tier == "local"
    assert path.read_bytes() == BLOB and rep.bytes == len(BLOB) + 1


def test_a_local_file_of_the_wrong_size_is_refilled(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    path = tiers.local.path(tiers.layout.data(ck(1), "blob"))
    path.write_bytes(BLOB + b"tail")
    rep = Restorer(tiers).restore(ck(1))
    assert rep.served_by == {"local": 2, "us-east": 3} and rep.bad_chunks == []
    assert path.read_bytes() == BLOB
    assert not list(path.parent.glob(".*.partial"))


def test_a_restore_report_carries_what_was_skipped(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1, 2)
    tiers.local.path(tiers.layout.manifest(ck(2))).write_bytes(b"{")
    tiers.region.put(tiers.layout.latest, json.dumps({"id": ck(2), "step": 5}).encode())
    rep = Restorer(tiers).restore("latest")
    assert rep.id == ck(2) and rep.manifest_from == "us-east"
    assert list(rep.bad_manifests) == ["local"] and len(rep.quarantined) == 1
    assert rep.bad_latest == {"us-east": f"us-east: latest says step 5 but {ck(2)} is step 2"}
    assert rep.served_by == {"us-east": 5} and rep.unreachable == {}
    with pytest.raises(UnknownCheckpoint, match=r"unknown checkpoint 'step-00000404'.*"
                                                r"known: step-00000001, step-00000002"):
        Restorer(tiers).restore("step-00000404")


@pytest.mark.parametrize("delta", [1, -1, CS])
def test_an_object_of_the_wrong_size_serves_nothing(tmp_path: Path, delta: int) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")
    tiers.local.delete(key)
    obj = tiers.region.path(key)
    obj.write_bytes(BLOB + b"x" * delta if delta > 0 else BLOB[:delta])
    rep = Restorer(tiers).restore(ck(1))
    assert rep.bad_sizes == [{"tier": "us-east", "item": "blob", "size": len(BLOB) + delta,
                              "expected": len(BLOB)}]
    assert rep.served_by == {"local": 2, "us-west": 3} and rep.bad_chunks == []
    assert rep.repaired == ["us-east:blob"] and obj.read_bytes() == BLOB


def test_when_every_copy_has_the_wrong_size_nothing_is_restored(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")
    for s in tiers.all:
        s.path(key).write_bytes(BLOB + b"!")
    with pytest.raises(Exception, match="no reachable tier holds a good copy of chunk"):
        Restorer(tiers).restore(ck(1))


# --- verify -----------------------------------------------------------------------------------
def test_verify_says_per_tier_what_is_wrong(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")

    def status(store) -> dict:
        return Restorer(tiers).verify(ck(1), store)

    res = status(tiers.region)
    assert (res["status"], res["ok"], res["version"], res["error"]) == ("ok", True, 3, None)
    assert res["hash"] == tiers.read_manifest(tiers.region, ck(1)).hash
    raw = bytearray(tiers.replicas[0].path(key).read_bytes())
    raw[2 * CS] ^= 1
    tiers.replicas[0].path(key).write_bytes(bytes(raw))
    res = status(tiers.replicas[0])
    assert (res["status"], res["ok"], res["bad_chunks"]) == (
        "corrupt", False, [{"item": "blob", "chunk": 2}])
    tiers.replicas[0].path(key).write_bytes(BLOB[:-1])
    assert status(tiers.replicas[0])["bad_sizes"] == [{"item": "blob", "size": len(BLOB) - 1,
                                                       "expected": len(BLOB)}]
    tiers.local.delete(key)
    res = status(tiers.local)
    assert (res["status"], res["missing"], res["ok"]) == ("missing", ["blob"], False)
    tiers.replicas[0].delete(tiers.layout.manifest(ck(1)))
    res = status(tiers.replicas[0])
    assert (res["status"], res["ok"]) == ("absent", False)
    # The region now holds another save: it is what a restore would serve, so the local
    # copy (data intact) is the one that differs.
    tiers.local.put(key, BLOB)
    rewrite(tiers.region, tiers, ck(1), save_uuid="e" * 32)
    assert status(tiers.region)["status"] == "ok"
    res = status(tiers.local)
    assert (res["status"], res["ok"]) == ("differs", False)
    assert res["error"].startswith("local holds another copy") and "than us-east" in res["error"]
    tiers.region.path(tiers.layout.manifest(ck(1))).write_bytes(b"")
    res = status(tiers.region)
    assert res["status"] == "bad-manifest" and "not valid JSON" in res["error"]


# --- the other readers of manifests: resume and gc ----------------------------------------------
def test_resume_sets_a_damaged_local_copy_aside_instead_of_failing(tmp_path: Path) -> None:
    dead = {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:{free_port()}",
            "bucket": "b-dead", "access_key": "k", "secret_key": "s", "timeout_s": 1.0}
    cfg = dir_cfg(tmp_path, region=dead, replicas=[])
    with CheckpointManager(cfg) as mgr:
        assert "us-east" in mgr.save(1, {"blob": BLOB}).wait(30).errors  # stays local
    tiers = Tiers(cfg)
    tiers.local.path(tiers.layout.manifest(ck(1))).write_bytes(b'{"version": 2')
    events: list[tuple[str, dict]] = []
    with CheckpointManager(cfg, events=lambda k, d: events.append((k, d))) as mgr:
        assert mgr.resume() == []  # nothing pushed from a copy that cannot be trusted
    quarantined = [d for k, d in events if k == "resume.quarantine"]
    assert [d["id"] for d in quarantined] == [ck(1)]
    assert "not valid JSON" in quarantined[0]["error"]
    assert Path(quarantined[0]["to"]).parent == tiers.root / "quarantine"
    assert (Path(quarantined[0]["to"]) / "data" / "blob").read_bytes() == BLOB


def test_gc_keeps_and_names_checkpoints_whose_manifest_is_damaged(tmp_path: Path) -> None:
    from rackscale.checkpoint import gc

    cfg = dir_cfg(tmp_path, retention={"keep_local": 1, "keep_region": 1})
    tiers = save(cfg, 1, 2, 3)
    tiers.region.path(tiers.layout.manifest(ck(1))).write_bytes(b"")
    tiers.region.put(tiers.layout.latest, b"[]")  # a damaged pointer protects nothing
    rep = gc(tiers)
    assert rep.damaged == [f"us-east:{ck(1)}"]
    assert rep.deleted == {"local": [ck(1), ck(2)], "us-east": [ck(2)],
                           "us-west": [ck(1), ck(2)]}
    assert tiers.committed_ids(tiers.region) == [ck(1), ck(3)]


# --- what the mutation run found unpinned -------------------------------------------------------
def test_a_pointer_whose_checkpoint_no_answering_tier_can_hold_is_outvoted(tmp_path: Path) -> None:
    dead = {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:{free_port()}",
            "bucket": "b-dead", "access_key": "k", "secret_key": "s", "timeout_s": 1.0}
    tiers = Tiers(dir_cfg(tmp_path, region=dead, replicas=[]))
    tiers.local.put(tiers.layout.latest, json.dumps({"id": ck(5), "step": 5}).encode())
    r = Restorer(tiers)
    # Not "unreachable" out of resolve_id: the pointer loses, then no checkpoint is known.
    with pytest.raises(UnknownCheckpoint, match="'latest'"):
        r.resolve_id("latest")
    assert r.bad_latest == {"local": f"local: latest points at {ck(5)}, but no tier that "
                                     f"might hold it answered"}


@pytest.mark.parametrize("why", ["connection reset", "object deleted"])
def test_a_tier_that_fails_a_chunk_request_is_passed_over_for_the_next(tmp_path: Path,
                                                                       monkeypatch, why) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(ck(1))))  # nothing cached

    get = tiers.region.get

    def fail(key, *a, **k):
        if "/data/" not in key:  # the manifest still reads: the data GETs fail
            return get(key, *a, **k)
        if why == "connection reset":
            raise StoreUnreachable("us-east: connection reset while reading")
        raise ObjectMissing(key)  # deleted between the HEAD and the GET
    monkeypatch.setattr(tiers.region, "get", fail)  # it answers HEAD, then fails the GET
    rep = Restorer(tiers).restore(ck(1))
    m = tiers.read_manifest(tiers.local, ck(1))
    chunks = sum(len(it.chunks) for it in m.items)
    if why == "connection reset":  # then us-east is skipped for the rest of the restore
        assert (rep.served_by, list(rep.unreachable)) == ({"us-west": chunks}, ["us-east"])
    else:  # only the objects asked for were gone; the empty item needs no GET from us-east
        assert (rep.served_by, rep.unreachable) == ({"us-west": chunks - 1, "us-east": 1}, {})
    assert tiers.local.path(tiers.layout.data(ck(1), "blob")).read_bytes() == BLOB


def test_verify_reports_every_item_after_a_wrong_size_and_a_vanished_object_once(
        tmp_path: Path, monkeypatch) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    west = tiers.replicas[0]
    west.path(tiers.layout.data(ck(1), "blob")).write_bytes(BLOB[:-1])
    west.delete(tiers.layout.data(ck(1), "n"))
    west.delete(tiers.layout.data(ck(1), "z"))
    res = Restorer(tiers).verify(ck(1), west)
    assert (res["status"], res["missing"]) == ("missing", ["n", "z"])
    assert res["bad_sizes"] == [{"item": "blob", "size": len(BLOB) - 1, "expected": len(BLOB)}]
    # An object deleted between HEAD and GET is missing once, not once per chunk.
    key = tiers.layout.data(ck(1), "blob")

    def gone(k, *a, **kw):
        if k == key:
            raise ObjectMissing(k)
        return orig(k, *a, **kw)
    orig = tiers.region.get
    monkeypatch.setattr(tiers.region, "get", gone)
    res = Restorer(tiers).verify(ck(1), tiers.region)
    assert (res["status"], res["missing"], res["bad_chunks"]) == ("missing", ["blob"], [])


def test_verify_of_a_copy_no_configured_tier_holds_checks_it_on_its_own(tmp_path: Path) -> None:
    elsewhere = save(dir_cfg(tmp_path / "a"), 1)  # e.g. a copy an operator keeps aside
    res = Restorer(Tiers(dir_cfg(tmp_path / "b"))).verify(ck(1), elsewhere.region)
    assert (res["status"], res["ok"], res["error"]) == ("ok", True, None)


def test_a_differing_copy_names_both_hashes(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    own = tiers.read_manifest(tiers.local, ck(1))
    other = rewrite(tiers.region, tiers, ck(1), save_uuid="e" * 32)
    res = Restorer(tiers).verify(ck(1), tiers.local)
    assert res["error"] == (f"local holds another copy (hash {own.hash[:16]}) than us-east "
                            f"(hash {other.hash[:16]})")


def test_when_no_copy_of_a_chunk_is_good_the_error_says_what_was_tried(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")
    for store in (tiers.local, tiers.region, tiers.replicas[0]):
        raw = bytearray(store.path(key).read_bytes())
        raw[2 * CS] ^= 0xFF  # chunk 2, in every copy
        store.path(key).write_bytes(bytes(raw))
    with pytest.raises(IntegrityError) as err:
        Restorer(tiers).restore(ck(1))
    assert str(err.value) == (f"checkpoint {ck(1)}: no reachable tier holds a good copy of "
                              f"chunk 2 of blob (unreachable: none; wrong size: none); "
                              f"nothing was changed")


def test_an_unknown_id_is_unknown_with_or_without_a_dead_tier(tmp_path: Path) -> None:
    with pytest.raises(UnknownCheckpoint, match=r"\(known: none\)"):
        Restorer(Tiers(dir_cfg(tmp_path / "empty"))).manifest(ck(7))
    cfg = dir_cfg(tmp_path)
    save(cfg, 1)
    dead = {"name": "us-east", "kind": "s3", "endpoint": f"http://127.0.0.1:{free_port()}",
            "bucket": "b-dead", "access_key": "k", "secret_key": "s", "timeout_s": 1.0}
    # A tier is down but this node knows checkpoints: the id is unknown, not "unreachable".
    with pytest.raises(UnknownCheckpoint, match=ck(1)):
        Restorer(Tiers(dir_cfg(tmp_path, region=dead, replicas=[]))).manifest(ck(9))


def test_fix_cache_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        Restorer.manifest(None, ck(1), True)  # type: ignore[arg-type, misc]


def test_progress_counts_every_byte_once(tmp_path: Path, monkeypatch) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    m = tiers.read_manifest(tiers.local, ck(1))
    ticks: list[int] = []
    t0 = time.perf_counter()
    rep = Restorer(tiers, progress=ticks.append).restore(ck(1))  # all from the local cache
    assert 0 < rep.seconds <= time.perf_counter() - t0
    assert rep.served_by == {"local": sum(len(it.chunks) for it in m.items)}
    assert sum(ticks) == m.total_bytes
    # From the region: an empty item is asked for with no GET (S3 has no empty range).
    shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(ck(1))))
    asked: list[tuple] = []
    get = tiers.region.get
    monkeypatch.setattr(tiers.region, "get",
                        lambda k, *a: (asked.append((k.rsplit("/", 1)[-1], *a)), get(k, *a))[1])
    ticks.clear()
    Restorer(tiers, progress=ticks.append).restore(ck(1))
    assert sum(ticks) == m.total_bytes
    assert sorted(a for a in asked if a[0] != "manifest.json") == [
        ("blob", 0, CS), ("blob", CS, 2 * CS), ("blob", 2 * CS, 3 * CS), ("n", 0, 1)]


def test_an_empty_item_of_the_wrong_size_is_repaired_with_one_empty_part(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "z")
    tiers.region.path(key).write_bytes(b"junk")
    shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(ck(1))))  # fetched, not cached
    sent: list[int] = []
    upload_part = tiers.region.upload_part
    tiers.region.upload_part = lambda k, u, n, data: (sent.append(n), upload_part(k, u, n,
                                                                              data))[1]
    rep = Restorer(tiers).restore(ck(1))
    assert rep.bad_sizes == [{"tier": "us-east", "item": "z", "size": 4, "expected": 0}]
    assert rep.repaired == ["us-east:z"]
    assert sent == [1]  # S3 completes no upload without a part: one empty part
    assert tiers.region.path(key).read_bytes() == b""


def test_an_item_whose_name_holds_a_colon_is_repaired_by_that_name(tmp_path: Path) -> None:
    # The saver escapes its item names, but files a writer put in the cache itself (DCP, an
    # import of a directory) keep theirs: "tier:item" is split at the first colon only.
    from rackscale.checkpoint.saver import hash_entries
    cfg = dir_cfg(tmp_path)
    with CheckpointManager(cfg) as mgr:
        data = mgr.local_data_dir(ck(1))
        data.mkdir(parents=True)
        (data / "opt:state").write_bytes(BLOB)
        entries = hash_entries(data, ["opt:state"], CS, cfg.hash_algo)
        assert mgr.commit_files(1, ck(1), entries).wait(30).errors == {}
    tiers = Tiers(cfg)
    key = tiers.layout.data(ck(1), "opt:state")
    raw = bytearray(tiers.region.path(key).read_bytes())
    raw[5] ^= 0xFF
    tiers.region.path(key).write_bytes(bytes(raw))
    tiers.local.delete(key)
    rep = Restorer(tiers).restore(ck(1))
    assert rep.repaired == ["us-east:opt:state"]
    assert tiers.region.path(key).read_bytes() == BLOB


def test_a_tier_without_a_pointer_does_not_end_the_vote(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1, 2)
    tiers.local.delete(tiers.layout.latest)  # the first tier asked holds no pointer
    tiers.region.put(tiers.layout.latest, b"garbage")
    r = Restorer(tiers)
    assert r.resolve_id("latest") == ck(2)  # the replica's pointer
    assert list(r.bad_latest) == ["us-east"]  # the region's was read, and lost


@pytest.mark.parametrize("body", [b'{"id": "..", "step": 99}',
                                  b'{"id": "a\\u0000b", "step": 9}'])
def test_a_pointer_to_no_plain_id_is_outvoted_for_restore_show_and_verify(
        tmp_path: Path, body: bytes) -> None:
    tiers = save(dir_cfg(tmp_path), 1, 2)
    tiers.region.put(tiers.layout.latest, body)
    r = Restorer(tiers)
    assert r.resolve_id("latest") == ck(2)
    assert list(r.bad_latest) == ["us-east"]
    assert r.manifest(r.resolve_id("latest"))[0].step == 2  # what `show latest` reads
    assert Restorer(tiers).verify("latest", tiers.replicas[0])["ok"]
    report = Restorer(tiers).restore("latest")
    assert report.id == ck(2) and list(report.bad_latest) == ["us-east"]


def test_an_object_gone_from_one_region_is_served_by_another_said_and_copied_back(
        tmp_path: Path) -> None:
    from rackscale.checkpoint import listing_rows

    tiers = save(dir_cfg(tmp_path), 1)
    key = tiers.layout.data(ck(1), "blob")
    tiers.region.path(key).unlink()
    shutil.rmtree(tiers.local.root)  # a new node: nothing cached
    assert listing_rows(tiers, Restorer(tiers), [])[0]["tiers"] == {
        "local": "no", "us-east": "missing", "us-west": "yes"}  # as verify sees it
    assert Restorer(tiers).verify(ck(1), tiers.region)["status"] == "missing"
    report = Restorer(tiers).restore(ck(1))
    assert report.missing == [{"tier": "us-east", "item": "blob"}]
    assert report.served_by == {"us-west": 3, "us-east": 2}  # blob from the other region
    assert report.repaired == ["us-east:blob"]
    assert tiers.region.path(key).read_bytes() == BLOB  # copied back, verified
    assert Restorer(tiers).verify(ck(1), tiers.region)["ok"]
    assert listing_rows(tiers, Restorer(tiers), [])[0]["tiers"]["us-east"] == "yes"


def test_a_tier_that_never_held_the_checkpoint_is_not_missing_anything(tmp_path: Path) -> None:
    tiers = save(dir_cfg(tmp_path), 1)
    shutil.rmtree(tiers.replicas[0].path(tiers.layout.ckpt_prefix(ck(1))))
    shutil.rmtree(tiers.local.root)
    tiers.region.path(tiers.layout.data(ck(1), "n")).unlink()
    with pytest.raises(IntegrityError):
        Restorer(tiers).restore(ck(1))
    tiers = save(dir_cfg(tmp_path / "2"), 1)
    shutil.rmtree(tiers.replicas[0].path(tiers.layout.ckpt_prefix(ck(1))))
    shutil.rmtree(tiers.local.root)
    report = Restorer(tiers).restore(ck(1))
    assert report.missing == [] and report.repaired == []
