"""The manifest's rules, one decision per test: the state table, what the checkpoint hash
binds, what makes an item disagree with itself, the `latest` pointer, the key layout.

Every assertion names the decision and its evidence (the field, the message), so a changed
operator or constant in manifest.py fails here.
"""

from __future__ import annotations

import copy
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.checkpoint import CheckpointError
from rackscale.checkpoint.errors import ManifestInvalid
from rackscale.checkpoint.hashing import DEFAULT_ALGO, chunk_hashes, combine, digest
from rackscale.checkpoint.manifest import (
    MANIFEST_VERSION,
    ORDER,
    TORCH_ITEMSIZE,
    CkptState,
    ItemEntry,
    Layout,
    Manifest,
    advance,
    checkpoint_hash,
    chunk_count,
    ckpt_id_for,
    current_state,
    is_plain_id,
    latest_json,
    parse_latest,
)

CS = 4096
ALGO = DEFAULT_ALGO


def item(name: str, data: bytes, meta: dict | None = None) -> ItemEntry:
    ch = chunk_hashes(data, CS, ALGO)
    return ItemEntry(name, len(data), ch, combine(ch, ALGO), meta or {})


def sample() -> Manifest:
    return Manifest.new(
        id="step-00000003", step=3, save_uuid="ab" * 16, algo=ALGO, chunk_size=CS,
        items=[item("blob", bytes(range(256)) * 40),  # 10240 B = 3 chunks
               item("w", b"\x00" * 24, {"kind": "numpy", "dtype": "<f4", "shape": [2, 3],
                                        "key": "w"}),
               item("t", b"\x01" * 16, {"kind": "torch", "dtype": "bfloat16", "shape": [8],
                                        "key": "t"}),
               item("empty", b"")],
        created_at=1700000000.25)


def raw_of(m: Manifest) -> dict:
    return json.loads(m.to_json())


def load(raw: dict, **kw) -> Manifest:
    return Manifest.from_json(json.dumps(raw), **kw)


def rehash(raw: dict) -> dict:
    """Recompute the checkpoint hash after an edit (what a consistent rewrite would do)."""
    items = [ItemEntry(**i) for i in raw["items"]]
    raw["hash"] = checkpoint_hash(Manifest(**(raw | {"items": items})))
    return raw


# --- states ---------------------------------------------------------------------------------
EXPECTED = {None: {"staged"}, "staged": {"local"}, "local": {"region"},
            "region": {"replicated", "archived"}, "replicated": {"archived"}, "archived": set()}


@pytest.mark.parametrize("cur", [None, *ORDER])
@pytest.mark.parametrize("to", ORDER)
def test_every_transition_is_allowed_exactly_when_the_table_says(cur, to) -> None:
    states = {} if cur is None else {s.value: float(i) for i, s in
                                      enumerate(ORDER[:ORDER.index(cur) + 1])}
    if cur is CkptState.ARCHIVED:  # archived directly after region: no replicated entry
        states.pop("replicated")
    if to.value in EXPECTED[None if cur is None else cur.value]:
        advance(states, to, at=42.0)
        assert states[to.value] == 42.0 and current_state(states) is to
    else:
        with pytest.raises(CheckpointError, match=f"illegal checkpoint state transition "
                                                  f"{cur} -> {to.value}"):
            advance(states, to, at=42.0)


def test_current_state_is_the_furthest_reached_and_advance_stamps_now() -> None:
    assert current_state({}) is None
    assert current_state({"region": 2.0, "staged": 0.0, "local": 1.0}) is CkptState.REGION
    states: dict[str, float] = {}
    t0 = time.time()
    advance(states, CkptState.STAGED)
    assert t0 <= states["staged"] <= time.time()


@pytest.mark.parametrize(("size", "chunks"), [(0, 1), (1, 1), (CS - 1, 1), (CS, 1),
                                              (CS + 1, 2), (2 * CS, 2), (2 * CS + 1, 3)])
def test_chunk_count(size: int, chunks: int) -> None:
    assert chunk_count(size, CS) == chunks


# --- round trip and what the hash binds --------------------------------------------------------
def test_a_new_manifest_round_trips_and_is_the_current_version() -> None:
    m = sample()
    assert m.version == MANIFEST_VERSION == 3
    assert m.hash == checkpoint_hash(m) and len(m.hash) == len(digest(b"", ALGO))
    back = Manifest.from_json(m.to_json(), expect_id="step-00000003")
    assert back == m and back.to_json() == m.to_json()
    assert m.total_bytes == 10240 + 24 + 16 + 0
    tier = m.for_tier("us-west", {"staged": 1.0})
    assert (tier.tier, tier.states, tier.hash, tier.version, tier.items) == (
        "us-west", {"staged": 1.0}, m.hash, 3, m.items)


# Edits that keep every item consistent with itself: only the checkpoint hash can catch them.
BOUND_EDITS = {
    "id": lambda r: r.update(id="step-00000004"),
    "step": lambda r: r.update(step=4),
    "save_uuid": lambda r: r.update(save_uuid="cd" * 16),
    "created_at": lambda r: r.update(created_at=1.0),
    "item name": lambda r: r["items"][0].update(name="blob2"),
    "item order": lambda r: r["items"].reverse(),
    "item dropped": lambda r: r["items"].pop(),
    "meta key": lambda r: r["items"][1]["meta"].update(key="v"),
    "meta dtype": lambda r: r["items"][1]["meta"].update(dtype="<i4"),
    "meta shape": lambda r: r["items"][1]["meta"].update(shape=[3, 2]),
    "bytes meta": lambda r: r["items"][3]["meta"].update(note="x"),
}


@pytest.mark.parametrize("edit", sorted(BOUND_EDITS))
def test_the_checkpoint_hash_binds_every_field_a_reader_trusts(edit: str) -> None:
    raw = raw_of(sample())
    BOUND_EDITS[edit](raw)
    with pytest.raises(ManifestInvalid, match="does not match its own checkpoint hash"):
        load(raw)
    load(rehash(raw))  # the same edit with the hash recomputed is a valid manifest


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.data())
def test_any_change_to_an_item_is_refused(data: st.DataObject) -> None:
    """Property: change any item's size, a chunk hash or its item hash and the manifest is
    refused, whichever rule notices first."""
    raw = raw_of(sample())
    it = raw["items"][data.draw(st.integers(0, len(raw["items"]) - 1))]
    what = data.draw(st.sampled_from(["size", "chunk", "hash", "drop chunk"]))
    if what == "size":
        orig = it["size"]
        it["size"] = data.draw(st.integers(0, 4 * CS).filter(lambda s: s != orig))
    elif what == "chunk":
        n = data.draw(st.integers(0, len(it["chunks"]) - 1))
        it["chunks"][n] = digest(data.draw(st.binary(min_size=1, max_size=8)), ALGO)
    elif what == "hash":
        it["hash"] = digest(b"other", ALGO)
    else:
        it["chunks"].pop()
    assert raw != raw_of(sample())
    with pytest.raises(ManifestInvalid):
        load(raw)


def test_states_and_tier_are_history_outside_the_hash() -> None:
    raw = raw_of(sample())
    raw["states"] = {"staged": 5.0, "region": 9}
    raw["tier"] = "archive"
    m = load(raw)
    assert (m.states, m.tier) == ({"staged": 5.0, "region": 9}, "archive")
    raw["states"] = {"staged": True}
    with pytest.raises(ManifestInvalid, match=r"states\['staged'\] must be a time"):
        load(raw)


def test_version_1_manifests_still_read_and_their_items_are_still_checked() -> None:
    raw = raw_of(sample())
    raw["version"] = 1
    del raw["job"]  # versions 1 and 2 have no job
    raw["hash"] = combine([i["hash"] for i in raw["items"]], ALGO)
    m = load(raw)
    assert m.version == 1 and m.hash == checkpoint_hash(m)
    assert m.for_tier("local", {}).version == 1
    raw["created_at"] = 5.0  # v1 did not bind it: still valid
    assert load(raw).created_at == 5.0
    raw["items"][0]["size"] = CS  # ... but an item that disagrees with its chunks is refused
    with pytest.raises(ManifestInvalid, match="3 chunk hash"):
        load(raw)


@pytest.mark.parametrize("version", [0, 4, -1])
def test_other_versions_are_refused_naming_what_is_read(version: int) -> None:
    raw = raw_of(sample()) | {"version": version}
    with pytest.raises(ManifestInvalid, match=rf"manifest version {version} is not supported "
                                              rf"\(this rackscale reads \[1, 2, 3\]\)"):
        load(raw)


# --- types, keys, ids ---------------------------------------------------------------------------
@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r.pop("step"), "field `step` is missing"),
    (lambda r: r.update(step="3"), "field `step` must be int, not str"),
    (lambda r: r.update(step=True), "field `step` must be int, not bool"),
    (lambda r: r.update(step=3.0), "field `step` must be int, not float"),
    (lambda r: r.update(items={}), "field `items` must be list, not dict"),
    (lambda r: r.update(created_at="now"), "field `created_at` must be int or float"),
    (lambda r: r.update(version="2"), "field `version` must be int"),
    (lambda r: r.update(extra=1), r"unknown field\(s\) \['extra'\]"),
    (lambda r: r["items"][0].update(extra=1), r"items\[0\]: unknown field\(s\) \['extra'\]"),
    (lambda r: r["items"].__setitem__(0, "blob"), r"items\[0\]: must be an object, not str"),
    (lambda r: r["items"][0]["chunks"].__setitem__(1, 7), r"chunks\[1\] must be str, not int"),
    (lambda r: r["items"][1].update(meta=[]), "field `meta` must be dict, not list"),
    (lambda r: r["items"][0].update(size=True), "field `size` must be int, not bool"),
    (lambda r: r["items"][0].pop("name"), "field `name` is missing"),
])
def test_a_field_of_the_wrong_type_is_named(edit, message: str) -> None:
    raw = raw_of(sample())
    edit(raw)
    with pytest.raises(ManifestInvalid, match=message):
        load(raw, where="us-east: ckpt/step-00000003/manifest.json")
    with pytest.raises(ManifestInvalid, match=r"^us-east: ckpt/step-00000003/manifest.json: "):
        load(raw, where="us-east: ckpt/step-00000003/manifest.json")


@pytest.mark.parametrize(("data", "message"), [
    (b"", "not valid JSON"), (b"{", "not valid JSON"), (b"\xff\xfe", "not valid JSON"),
    (b"[1]", "must be a JSON object, not list"), (b"null", "must be a JSON object"),
])
def test_what_does_not_parse_is_invalid(data: bytes, message: str) -> None:
    with pytest.raises(ManifestInvalid, match=message):
        Manifest.from_json(data)


def test_the_id_must_match_the_key_it_was_read_from() -> None:
    data = sample().to_json()
    with pytest.raises(ManifestInvalid, match="field `id` is 'step-00000003' but the manifest "
                                              "is stored under 'step-00000002'"):
        Manifest.from_json(data, expect_id="step-00000002")
    assert Manifest.from_json(data).id == "step-00000003"  # no key given: nothing to match


# --- an item against itself ------------------------------------------------------------------
def _hex(c: str) -> str:
    return c.upper() if any(ch.isalpha() for ch in c) else "g" + c[1:]


ITEM_RULES = [
    ("one chunk fewer", lambda i: i["chunks"].pop(), "2 chunk hash(es) for 10240 bytes; "
     "chunks of 4096 bytes need 3"),
    ("one chunk more", lambda i: i["chunks"].append(i["chunks"][0]), "4 chunk hash"),
    ("size of 2 chunks", lambda i: i.update(size=2 * CS), "need 2"),
    ("size + 1 chunk", lambda i: i.update(size=3 * CS + 1), "need 4"),
    ("negative size", lambda i: i.update(size=-1), "size -1 is negative"),
    ("not hex", lambda i: i["chunks"].__setitem__(0, _hex(i["chunks"][0])), "chunks[0] is not"),
    ("short digest", lambda i: i["chunks"].__setitem__(2, i["chunks"][2][:-1]), "chunks[2]"),
    ("long digest", lambda i: i["chunks"].__setitem__(2, i["chunks"][2] + "0"), "chunks[2]"),
    ("item hash", lambda i: i.update(hash=digest(b"x", ALGO)), "item hash does not match"),
    # a wrong hash that sorts after the right one and one that sorts before: both refused
    ("item hash ffff", lambda i: i.update(hash="f" * len(i["hash"])), "item hash does not match"),
    ("item hash 0000", lambda i: i.update(hash="0" * len(i["hash"])), "item hash does not match"),
    ("slash", lambda i: i.update(name="a/b"), "'a/b' is not a plain file name"),
    ("dotdot", lambda i: i.update(name=".."), "is not a plain file name"),
    ("dot", lambda i: i.update(name="."), "is not a plain file name"),
    ("empty name", lambda i: i.update(name=""), "is not a plain file name"),
    ("nul", lambda i: i.update(name="a\0b"), "is not a plain file name"),
]


@pytest.mark.parametrize("rule", ITEM_RULES, ids=[r[0] for r in ITEM_RULES])
def test_an_item_must_agree_with_its_chunks_size_and_name(rule) -> None:
    _, edit, message = rule
    raw = raw_of(sample())
    edit(raw["items"][0])
    with pytest.raises(ManifestInvalid, match=r"items\[0\] \(.*\): .*" + _re(message)):
        load(rehash(raw))  # even with the checkpoint hash recomputed


def _re(s: str) -> str:
    import re
    return re.escape(s)


META_RULES = [
    ("numpy shape", 1, {"shape": [2, 4]}, "shape [2, 4] of <f4 is 32 bytes but the item has 24"),
    ("numpy dtype size", 1, {"dtype": "<f8"}, "of <f8 is 48 bytes but the item has 24"),
    ("torch shape", 2, {"shape": [4]}, "shape [4] of bfloat16 is 8 bytes but the item has 16"),
    ("torch dtype size", 2, {"dtype": "float32"}, "of float32 is 32 bytes"),
    ("object dtype", 1, {"dtype": "O"}, "holds Python objects"),
    ("unknown numpy dtype", 1, {"dtype": "nope"}, "'nope' is not a numpy dtype"),
    ("torch attribute", 2, {"dtype": "load"}, "'load' is not a tensor dtype"),
    ("dtype not str", 1, {"dtype": 4}, "meta.dtype must be a dtype name"),
    ("unknown kind", 1, {"kind": "pickle"}, "meta.kind 'pickle' is unknown"),
    ("negative dims", 1, {"shape": [-2, -3]}, "meta.shape must be a list of sizes"),
    ("minus one dim", 1, {"shape": [-1, -6]}, "meta.shape must be a list of sizes"),
    # -1 x -1 x 6 is 6 elements, the item's 24 bytes of <f4: refused for the -1, not the size
    ("minus ones that multiply out", 1, {"shape": [-1, -1, 6]},
     "meta.shape must be a list of sizes"),
    ("bool dim", 1, {"shape": [True, 6]}, "meta.shape must be a list of sizes"),
    ("shape not list", 1, {"shape": "6"}, "meta.shape must be a list of sizes"),
    ("no shape", 1, {"shape": None}, "meta.shape must be a list of sizes"),
]


@pytest.mark.parametrize("rule", META_RULES, ids=[r[0] for r in META_RULES])
def test_a_tensor_item_must_agree_with_its_dtype_and_shape(rule) -> None:
    _, n, change, message = rule
    raw = raw_of(sample())
    raw["items"][n]["meta"].update(change)
    with pytest.raises(ManifestInvalid, match=rf"items\[{n}\] .*" + _re(message)):
        load(rehash(raw))


def test_raw_bytes_have_no_shape_to_agree_with_and_scalars_have_one_element() -> None:
    raw = raw_of(sample())
    raw["items"][0]["meta"] = {"kind": "bytes", "key": "blob"}
    raw["items"][2]["meta"] |= {"dtype": "float64", "shape": [2]}  # 16 B = 2 x 8
    assert load(rehash(raw)).items[0].meta["kind"] == "bytes"
    scalar = Manifest.new(id="s", step=0, save_uuid="u", algo=ALGO, chunk_size=CS,
                          items=[item("x", b"\0" * 8, {"kind": "numpy", "dtype": "<i8",
                                                       "shape": []})], created_at=0)
    assert scalar.items[0].size == 8


def test_the_checkpoint_hash_is_the_documented_canonical_json() -> None:
    """Sorted keys, no spaces, non-ASCII escaped: another implementation can recompute it."""
    m = Manifest.new(id="step-00000001", step=1, save_uuid="u", algo=ALGO, chunk_size=CS,
                     items=[item("gewicht-\u00e4", b"abc", {"key": "gewicht-\u00e4"})],
                     created_at=2.5)
    it = m.items[0]
    canonical = ('{"algo":"ALGO","chunk_size":4096,"created_at":2.5,"id":"step-00000001",'
                 '"items":[{"chunks":["CHUNK"],"hash":"ITEM","meta":{"key":"gewicht-\\u00e4"},'
                 '"name":"gewicht-\\u00e4","size":3}],"job":"","save_uuid":"u","step":1,'
                 '"version":3}')
    canonical = canonical.replace("ALGO", ALGO).replace("CHUNK", it.chunks[0]).replace(
        "ITEM", it.hash)
    assert m.hash == digest(canonical.encode(), ALGO)


def test_empty_tensors_and_one_byte_chunks_are_valid() -> None:
    m = Manifest.new(id="e", step=0, save_uuid="u", algo=ALGO, chunk_size=1,
                     items=[item("z", b"", {"kind": "torch", "dtype": "float32",
                                            "shape": [0, 5]})], created_at=0.0)
    assert load(raw_of(m)).items[0].meta["shape"] == [0, 5]
    ch = chunk_hashes(b"ab", 1, ALGO)
    two = Manifest.new(id="b", step=0, save_uuid="u", algo=ALGO, chunk_size=1,
                       items=[ItemEntry("b", 2, ch, combine(ch, ALGO), {})], created_at=0.0)
    assert len(load(raw_of(two)).items[0].chunks) == 2


def test_a_wrong_value_is_quoted_up_to_40_characters() -> None:
    raw = raw_of(sample()) | {"save_uuid": int("7" * 50)}
    with pytest.raises(ManifestInvalid) as err:
        load(raw)
    assert f"({'7' * 40!r})" in str(err.value)


def test_torch_element_sizes_are_torch_s_own() -> None:
    torch = pytest.importorskip("torch")
    for name, size in TORCH_ITEMSIZE.items():
        assert getattr(torch, name).itemsize == size, name


def test_a_value_json_cannot_write_makes_a_manifest_unhashable() -> None:
    raw = raw_of(sample())
    text = json.dumps(raw).replace('"meta": {}', '"meta": {"scale": NaN}', 1)
    with pytest.raises(ManifestInvalid, match=r"cannot be hashed \(Out of range float"):
        Manifest.from_json(text)


def test_a_latest_pointer_is_a_value() -> None:
    import dataclasses
    ptr = parse_latest(b'{"id": "a", "step": 1}')
    with pytest.raises(dataclasses.FrozenInstanceError):
        ptr.step = 2  # type: ignore[misc]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("chunk_size", 0, "chunk_size 0 must be positive"),
    ("chunk_size", -CS, "must be positive"),
    ("step", -1, "step -1 is negative"),
    ("algo", "md5", "hash algorithm 'md5' is unknown"),
])
def test_manifest_wide_fields_are_checked(field: str, value, message: str) -> None:
    raw = raw_of(sample()) | {field: value}
    with pytest.raises(ManifestInvalid, match=message):
        load(raw)


def test_duplicate_items_and_non_finite_times_are_refused() -> None:
    raw = raw_of(sample())
    raw["items"].append(copy.deepcopy(raw["items"][0]))
    with pytest.raises(ManifestInvalid, match="item 'blob' appears twice"):
        load(rehash(raw))
    for bad in ("NaN", "Infinity"):
        text = sample().to_json().decode().replace('"created_at": 1700000000.25',
                                                   f'"created_at": {bad}')
        with pytest.raises(ManifestInvalid, match="created_at is not a finite time"):
            Manifest.from_json(text)


def test_new_refuses_an_inconsistent_item() -> None:
    bad = item("blob", b"x" * 5000)
    bad.size = 4000
    with pytest.raises(ManifestInvalid, match="new manifest of s: items"):
        Manifest.new(id="s", step=0, save_uuid="u", algo=ALGO, chunk_size=CS, items=[bad],
                     created_at=0.0)


# --- the latest pointer and the layout -----------------------------------------------------------
def test_latest_pointer_round_trips() -> None:
    m = sample()
    ptr = parse_latest(latest_json(m, pid=7))
    assert (ptr.id, ptr.step, ptr.hash) == ("step-00000003", 3, m.hash)
    assert json.loads(latest_json(m, pid=7))["pid"] == 7
    assert parse_latest(b'{"id": "x", "step": 0}').hash == ""


@pytest.mark.parametrize(("data", "message"), [
    (b"", "not valid JSON"), (b"{not json", "not valid JSON"), (b"[]", "must be a JSON object"),
    (b'{"step": 1}', "field `id` is missing"), (b'{"id": "a"}', "field `step` is missing"),
    (b'{"id": "a", "step": "1"}', "field `step` must be int"),
    (b'{"id": "a", "step": true}', "must be int, not bool"),
    (b'{"id": "a", "step": -1}', "is not a checkpoint"),
    (b'{"id": "", "step": 1}', "is not a checkpoint"),
    (b'{"id": "a/b", "step": 1}', "is not a checkpoint"),
    (b'{"id": "a", "step": 1, "hash": 5}', "field `hash` must be str"),
])
def test_a_bad_latest_pointer_is_named(data: bytes, message: str) -> None:
    with pytest.raises(ManifestInvalid, match=r"^us-west: latest: .*" + _re(message)):
        parse_latest(data, "us-west: latest")


def test_layout_keys_and_ids() -> None:
    lay = Layout("ckpt")
    assert lay.data("step-1", "w") == "ckpt/step-1/data/w"
    assert lay.data_prefix("step-1") == "ckpt/step-1/data/"
    assert lay.manifest("step-1") == "ckpt/step-1/manifest.json"
    assert lay.ckpt_prefix("step-1") == "ckpt/step-1/"
    assert lay.latest == "ckpt/latest"
    keys = ["ckpt/b/manifest.json", "ckpt/a/data/x", "ckpt/a/manifest.json", "other/c/manifest"
            ".json", "ckptx/d/manifest.json", "ckpt/latest", "ckpt/e/manifest.json.tmp"]
    assert lay.ids_from_keys(keys) == ["a", "b"]
    assert ckpt_id_for(7) == "step-00000007" and ckpt_id_for(123456789) == "step-123456789"


def test_a_manifest_is_strict_json_even_with_a_non_finite_state_time() -> None:
    # `states` is history outside the hash, but the file is read by other tools too: NaN is
    # not JSON, so writing it is refused rather than producing a file strict parsers reject.
    m = sample().for_tier("us-east", {"staged": 1.0, "region": float("nan")})
    with pytest.raises(ValueError, match="Out of range float"):
        m.to_json()


def test_where_and_expect_id_are_keyword_only() -> None:
    # Both are strings: given by position, an id could be taken for a message or back.
    from rackscale.checkpoint.manifest import check_manifest
    m = sample()
    with pytest.raises(TypeError):
        Manifest.from_json(m.to_json(), m.id)  # type: ignore[misc]
    with pytest.raises(TypeError):
        check_manifest(m, "here")  # type: ignore[misc]


def test_a_new_manifest_takes_its_fields_by_name_only() -> None:
    # Seven fields, several of them str or int: by position they are easy to swap unseen.
    m = sample()
    with pytest.raises(TypeError):
        Manifest.new(m.id, m.step, m.save_uuid, m.algo, m.chunk_size,  # type: ignore[misc]
                     m.items, m.created_at)


def _version_2(**over) -> dict:
    """A manifest as version 2 wrote it: no `job` field, and none in its hash."""
    raw = raw_of(sample())
    raw["version"] = 2
    del raw["job"]
    return rehash(raw | over)


def test_version_2_manifests_read_without_a_job_and_write_back_without_one() -> None:
    raw = _version_2()
    m = load(raw)
    assert (m.version, m.job) == (2, "")
    assert "job" not in raw_of(m) and "job" not in raw_of(m.for_tier("us-east", {}))
    assert m.hash == checkpoint_hash(m) == raw["hash"]
    # a job field is no part of version 2: refused as a field it does not have
    with pytest.raises(ManifestInvalid, match="job"):
        load(raw | {"job": "train"})
    # the version 3 hash binds the job: the same manifest as version 3 hashes differently
    v3 = raw_of(sample())
    assert "job" in v3 and load(v3).hash != m.hash


def test_the_manifest_must_be_the_one_of_its_key_whichever_way_the_ids_sort() -> None:
    data = sample().to_json()  # id step-00000003
    for stored_under in ("step-00000002", "step-00000004", "step-3"):
        with pytest.raises(ManifestInvalid, match="but the manifest is stored under"):
            Manifest.from_json(data, expect_id=stored_under)


@pytest.mark.parametrize(("ckpt_id", "plain"), [
    ("step-00000001", True), ("a b", True), ("a~b", True), ("caf\u00e9", True),
    ("a\x80b", True), ("", False), (".", False), ("..", False), ("a/b", False),
    ("a\\b", False), ("a\x00b", False), ("a\x1fb", False), ("a\x7fb", False),
    ("a\tb", False)])
def test_a_plain_id_is_one_path_segment_without_control_characters(ckpt_id: str,
                                                                    plain: bool) -> None:
    # space (32) is the first character allowed and DEL (127) the only one above it refused
    assert is_plain_id(ckpt_id) is plain
