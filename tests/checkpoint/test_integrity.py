"""Integrity against damaged manifests, data and pointers, on real SeaweedFS regions.

A manifest that understates an item, data gone from a tier that keeps its manifest, a damaged
local cache manifest, one tier's garbage `latest`, an unreachable region in `ls`, and a PUT cut
short by a killed client: each is caught, said, and served from a good tier where one exists.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from rackscale.checkpoint import CheckpointManager, Restorer, Tiers, parse_config
from rackscale.checkpoint.seaweed import free_port
from rackscale.cli import app
from tests.checkpoint.conftest import s3_config

runner = CliRunner()
CK = "step-00000001"


def blob_state(step: int) -> dict:
    """A raw-bytes item of 2.5 chunks (no dtype/shape to contradict a smaller size) and a
    tensor-like numpy item."""
    rng = np.random.default_rng(step)
    return {"blob": rng.integers(0, 255, (5 << 19), dtype=np.uint8).tobytes(),
            "w": rng.standard_normal(1000).astype(np.float32)}


def _saved(tmp_path: Path, regions: tuple, steps: tuple[int, ...] = (1,)) -> tuple[Path, dict]:
    cfg = s3_config(tmp_path, *regions, archive=None)
    with CheckpointManager(parse_config(cfg)) as mgr:
        for step in steps:
            assert mgr.save(step, blob_state(step)).wait(60).errors == {}
    path = tmp_path / "tiers.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, cfg


def _cli(*args: str):
    return runner.invoke(app, ["checkpoint", *args])


def _rewrite_manifests(tiers: Tiers, ckpt_id: str, edit) -> None:
    """Apply `edit` to the manifest JSON of every tier (write-once keys: delete, then put)."""
    key = tiers.layout.manifest(ckpt_id)
    for s in tiers.all:
        raw = json.loads(s.get(key))
        edit(raw)
        s.delete(key)
        s.put(key, json.dumps(raw).encode(), if_absent=True)


def test_a_manifest_that_understates_an_item_is_refused(tmp_path: Path, regions: tuple) -> None:
    """Fewer chunks and a smaller size (item hash left as saved): the checkpoint hash binds
    the item's size and chunk list, so no tier's manifest is trusted and nothing restores."""
    path, cfg = _saved(tmp_path, regions)
    tiers = Tiers(parse_config(cfg))

    def shorten(raw: dict) -> None:
        blob = next(i for i in raw["items"] if i["name"] == "blob")
        blob["chunks"] = blob["chunks"][:2]
        blob["size"] = 2 << 20

    _rewrite_manifests(tiers, CK, shorten)
    shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(CK)))
    r = _cli("restore", CK, "--config", str(path))
    assert r.exit_code == 2, r.output
    assert "no tier holds a manifest that checks out" in r.output
    assert not tiers.local.path(tiers.layout.data(CK, "blob")).exists()
    r = _cli("verify", CK, "--config", str(path), "--json")
    assert r.exit_code == 1, r.output
    got = {x["tier"]: x["status"] for x in json.loads(r.stdout)}
    assert got == {"local": "bad-manifest", "us-east": "bad-manifest",
                   "us-west": "bad-manifest"}


def test_a_self_consistent_short_manifest_fails_on_the_object_size(tmp_path: Path,
                                                                  regions: tuple) -> None:
    """Even a manifest rewritten consistently (item and checkpoint hashes recomputed) cannot
    make a tier serve part of an object: every object is longer than the item it claims."""
    from rackscale.checkpoint.hashing import combine
    from rackscale.checkpoint.manifest import ItemEntry, Manifest, checkpoint_hash

    path, cfg = _saved(tmp_path, regions)
    tiers = Tiers(parse_config(cfg))

    def shorten_and_rehash(raw: dict) -> None:
        blob = next(i for i in raw["items"] if i["name"] == "blob")
        blob["chunks"], blob["size"] = blob["chunks"][:2], 2 << 20
        blob["hash"] = combine(blob["chunks"], raw["algo"])
        items = [ItemEntry(**i) for i in raw["items"]]
        raw["hash"] = checkpoint_hash(Manifest(**(raw | {"items": items})))

    _rewrite_manifests(tiers, CK, shorten_and_rehash)
    shutil.rmtree(tiers.local.path(tiers.layout.data_prefix(CK)))
    r = _cli("restore", CK, "--config", str(path))
    assert r.exit_code == 2 and "no reachable tier holds a good copy" in r.output, r.output
    assert "expected" in r.output and str(2 << 20) in r.output
    r = _cli("verify", CK, "--config", str(path), "--json")
    assert r.exit_code == 1
    res = {x["tier"]: x for x in json.loads(r.stdout)}
    for tier in ("us-east", "us-west"):
        assert res[tier]["status"] == "corrupt"
        assert res[tier]["bad_sizes"] == [{"item": "blob", "size": 5 << 19,
                                           "expected": 2 << 20}]


@pytest.mark.parametrize("where", ["every tier", "one tier"])
def test_verify_fails_when_data_is_missing(tmp_path: Path, regions: tuple, where: str) -> None:
    path, cfg = _saved(tmp_path, regions)
    tiers = Tiers(parse_config(cfg))
    gone = list(tiers.all) if where == "every tier" else [tiers.replicas[0]]
    for s in gone:
        s.delete(tiers.layout.data(CK, "blob"))
    r = _cli("verify", CK, "--config", str(path), "--json")
    assert r.exit_code == 1, r.output
    res = {x["tier"]: x for x in json.loads(r.stdout)}
    for s in tiers.all:
        if s in gone:
            assert res[s.name]["status"] == "missing" and res[s.name]["missing"] == ["blob"]
        else:
            assert res[s.name]["status"] == "ok" and res[s.name]["ok"] is True
    r = _cli("verify", CK, "--config", str(path))
    assert r.exit_code == 1 and "us-west" in r.output and "MISSING" in r.output


def _damage(kind: str, good: bytes, other: bytes) -> bytes:
    raw = json.loads(good)
    if kind == "truncated":
        return good[: len(good) // 2]
    if kind == "empty":
        return b""
    if kind == "not json":
        return b"\x00\xffgarbage{"
    if kind == "wrong types":
        raw["items"][0]["size"] = str(raw["items"][0]["size"])
    elif kind == "changed hash":
        raw["hash"] = "0" * len(raw["hash"])
    elif kind == "not an object":
        raw = [raw]
    elif kind == "another id":  # step 2's manifest under step 1's key
        return other
    return json.dumps(raw).encode()


DAMAGE = ["truncated", "empty", "not json", "wrong types", "changed hash", "not an object",
          "another id"]


def test_a_damaged_local_manifest_is_set_aside_and_served_from_the_region(
        tmp_path: Path, regions: tuple) -> None:
    path, cfg = _saved(tmp_path, regions, steps=(1, 2))
    tiers = Tiers(parse_config(cfg))
    local_key = tiers.layout.manifest(CK)
    good = tiers.local.get(local_key)
    other = tiers.local.get(tiers.layout.manifest("step-00000002"))
    for n, kind in enumerate(DAMAGE):
        tiers.local.path(local_key).write_bytes(_damage(kind, good, other))
        for cmd in (["ls"], ["show", CK], ["verify", CK], ["gc", "--dry-run"]):
            r = _cli(*cmd, "--config", str(path))
            assert r.exception is None or isinstance(r.exception, SystemExit), (kind, cmd,
                                                                                r.output)
        r = _cli("ls", "--config", str(path), "--json")
        assert r.exit_code == 1, (kind, r.output)
        doc = json.loads(r.stdout)
        row = next(x for x in doc["checkpoints"] if x["id"] == CK)
        assert row["tiers"] == {"local": "bad", "us-east": "yes", "us-west": "yes"}, kind
        assert row["manifest_from"] == "us-east" and "local" in doc["damaged"][CK]
        r = _cli("verify", CK, "--config", str(path), "--json")
        res = {x["tier"]: x["status"] for x in json.loads(r.stdout)}
        assert r.exit_code == 1 and res == {"local": "bad-manifest", "us-east": "ok",
                                            "us-west": "ok"}, (kind, res)
        qdir = tiers.root / "quarantine"
        before = set(qdir.iterdir()) if qdir.exists() else set()
        r = _cli("restore", CK, "--config", str(path))
        assert r.exit_code == 0, (kind, r.output)
        assert "set aside" in r.output and "damaged manifest skipped" in r.output, kind
        quarantined = sorted(qdir.iterdir())
        assert len(quarantined) == n + 1, kind
        # names within one second differ only by a random suffix: take the new one, not the last
        (new,) = set(quarantined) - before
        assert (new / "manifest.json").read_bytes() == _damage(kind, good, other)
        # The cache holds the region's manifest again, and the data verifies.
        assert tiers.local.get(local_key) != _damage(kind, good, other)
        assert Restorer(tiers).verify(CK, tiers.local)["ok"], kind
        got, rep = Restorer(tiers).load_state(CK)
        assert got["blob"] == blob_state(1)["blob"] and rep.tier == "local"


def test_one_bad_latest_pointer_does_not_block_restore_latest(tmp_path: Path,
                                                            regions: tuple) -> None:
    path, cfg = _saved(tmp_path, regions, steps=(1, 2))
    tiers = Tiers(parse_config(cfg))
    latest = tiers.layout.latest
    tiers.local.put(latest, b"{not json")
    tiers.region.put(latest, json.dumps({"id": "step-00000099", "step": 99}).encode())
    r = _cli("restore", "latest", "--config", str(path), "--json")
    assert r.exit_code == 0, r.output
    rep = json.loads(r.stdout)
    assert rep["id"] == "step-00000002"
    assert set(rep["bad_latest"]) == {"local", "us-east"}
    assert "step-00000099, which no tier holds" in rep["bad_latest"]["us-east"]
    # A pointer whose step disagrees with the manifest it names is outvoted too.
    tiers.region.put(latest, json.dumps({"id": "step-00000001", "step": 7}).encode())
    r = Restorer(tiers)
    assert r.resolve_id("latest") == "step-00000002"
    assert "says step 7 but step-00000001 is step 1" in r.bad_latest["us-east"]


def test_ls_names_an_unreachable_region_and_fails(tmp_path: Path, regions: tuple) -> None:
    _, cfg = _saved(tmp_path, regions)
    dead = cfg | {"region": cfg["region"] | {"endpoint": f"http://127.0.0.1:{free_port()}"},
                  "local_dir": str(tmp_path / "fresh-node")}
    dpath = tmp_path / "dead.yaml"
    dpath.write_text(yaml.safe_dump(dead))
    r = _cli("ls", "--config", str(dpath), "--json")
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert list(doc["unreachable"]) == ["us-east"]
    assert [x["id"] for x in doc["checkpoints"]] == [CK]  # the other region still answers
    assert doc["checkpoints"][0]["tiers"]["us-east"] == "unreachable"
    r = _cli("ls", "--config", str(dpath))
    assert r.exit_code == 2 and "us-east unreachable" in r.output


def test_a_put_cut_short_by_a_killed_client_leaves_no_object(regions: tuple) -> None:
    """botocore sends a PUT's headers and body in two writes; a client killed between them
    must not leave an empty `latest` or (write-once, for good) an empty manifest."""
    store = regions[0].store("cutshort")

    class Killed(Exception):
        pass

    def send_headers_then_die(request, **_kw) -> None:
        url = request.url.split("://", 1)[1]
        hostport, path = url.split("/", 1)
        host, port = hostport.split(":")
        head = [f"PUT /{path} HTTP/1.1", f"Host: {hostport}"]
        head += [f"{k}: {v.decode() if isinstance(v, bytes) else v}"
                 for k, v in request.headers.items() if k.lower() != "expect"]
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            sock.shutdown(socket.SHUT_WR)  # the body never comes
            sock.recv(4096)
        raise Killed

    store.meta.meta.events.register("before-send.s3.PutObject", send_headers_then_die)
    for key, if_absent in (("p/latest", False), ("p/step-1/manifest.json", True)):
        with pytest.raises(Killed):
            store.put(key, b'{"id": "step-00000001", "step": 1}', if_absent=if_absent)
        assert store.head(key) is None, f"{key}: a cut-short PUT left an object"


def test_a_connection_dropped_mid_request_is_an_unreachable_tier() -> None:
    """A server that hangs up without answering (busy, restarting) is the tier being away:
    the room's error, which the saver records and the reader skips, never a raw botocore
    exception that kills the saver's background thread."""
    import threading

    from rackscale.checkpoint import StoreUnreachable
    from rackscale.checkpoint.s3store import S3Store

    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    stop = threading.Event()

    def hang_up() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)  # the request arrives; no response ever leaves

    t = threading.Thread(target=hang_up, daemon=True)
    t.start()
    try:
        store = S3Store(name="us-east", endpoint=f"http://127.0.0.1:{srv.getsockname()[1]}",
                        bucket="ck", access_key="k", secret_key="s", timeout_s=1.0)
        for call in (lambda: store.put("ckpt/latest", b"{}"), lambda: store.get("ckpt/x")):
            with pytest.raises(StoreUnreachable, match="'us-east'"):
                call()
    finally:
        stop.set()
        t.join(5)
        srv.close()
