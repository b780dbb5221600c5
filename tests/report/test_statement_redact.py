"""Redaction: keyed pseudonyms for region and rack names; the redacted report has the same
ledger, verifies on its own, and names nothing of the floor plan."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from rackscale.fleet import Topology
from rackscale.report.redact import Pseudonyms, RedactError, load_redaction_key, redact_bundle
from rackscale.report.sign import sign_bundle
from rackscale.report.verify import verify_bundle

from .bundles import Bundle, make_bundle, mixed_fleet
from .test_statement_recompute import MIXED_FAULTS

KEY_A, KEY_B = b"a" * 32, b"b" * 32
REAL_NAMES = ("eu-north", "eu/", "row-a", "row-b", "row-c", "/r01", "/r02", "/r03")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return make_bundle(tmp_path_factory.mktemp("redact"), mixed_fleet(), faults=MIXED_FAULTS,
                       extra_lifecycle=True)


def all_text(d: Path) -> str:
    """Every file's text, less the page's inline PNGs (base64 may spell anything)."""
    text = "\n".join(p.read_text() for p in sorted(d.rglob("*")) if p.is_file())
    return re.sub(r"base64,[A-Za-z0-9+/=]+", "", text)


def test_the_redacted_report_verifies_with_the_same_ledger(bundle: Bundle,
                                                            tmp_path: Path) -> None:
    assert not bundle.doc["warnings"]  # every fault names a component of the fleet
    out = tmp_path / "public"
    doc = redact_bundle(bundle.dir, out, KEY_A)
    assert {s["key"]: s["count"] for s in doc["ledger"]} == bundle.counts
    assert [s["lost"] for s in doc["ledger"]] == [s["lost"] for s in bundle.doc["ledger"]]
    assert not (out / "signature.json").exists()  # the redacted copy is signed on its own
    sign_bundle(out, bundle.key)
    result = verify_bundle(out, bundle.pub)
    assert result.ok, result.first_problem
    text = all_text(out)
    for name in REAL_NAMES:
        assert name not in text, name
    assert "sqlite" not in text  # nor where the store lives


def test_pseudonyms_are_stable_per_key_and_differ_across_keys(bundle: Bundle,
                                                              tmp_path: Path) -> None:
    a1 = redact_bundle(bundle.dir, tmp_path / "a1", KEY_A)
    a2 = redact_bundle(bundle.dir, tmp_path / "a2", KEY_A)
    b = redact_bundle(bundle.dir, tmp_path / "b", KEY_B)
    assert a1["evidence"]["root"] == a2["evidence"]["root"] != b["evidence"]["root"]
    assert [r["id"] for r in a1["racks"]] == [r["id"] for r in a2["racks"]]
    ids_a, ids_b = {r["id"] for r in a1["racks"]}, {r["id"] for r in b["racks"]}
    assert not ids_a & ids_b
    assert all(i.startswith("rg-") and "/rk-" in i for i in ids_a)


def test_racks_keep_their_template_and_leaf_group(bundle: Bundle) -> None:
    spec = mixed_fleet()
    p = Pseudonyms(spec, KEY_A)
    real, fake = Topology.build(spec), Topology.build(p.spec)
    assert len(real.ids) == len(fake.ids)
    per_leaf = spec.network.racks_per_leaf
    for rack in real.racks:
        region, name = rack.id.split("/")
        twin = fake.racks[fake.rack_of[fake.index[p.regions[region] + "/" + p.racks[
            (region, name)]]]]
        assert twin.template.name == rack.template.name
        assert twin.local_index // per_leaf == rack.local_index // per_leaf
    finding = "eu-north/row-b/c04/gpu1"
    assert p.text(finding).endswith("/c04/gpu1") and p.text(finding) in fake.index
    # a Slurm node name and a sentence are mapped the same way
    assert p.text("eu-north-row-b-c04") == p.text("eu-north/row-b/c04").replace("/", "-")
    assert p.text("rack eu/r02 escalated") == f"rack {p.text('eu/r02')} escalated"


def test_a_weak_or_missing_key_and_tampered_source_are_refused(bundle: Bundle,
                                                              tmp_path: Path) -> None:
    short = tmp_path / "short.key"
    short.write_text("abc")
    with pytest.raises(RedactError, match="at least 16 bytes"):
        load_redaction_key(short)
    with pytest.raises(RedactError, match="no such key file"):
        load_redaction_key(tmp_path / "none.key")
    src = tmp_path / "src"
    shutil.copytree(bundle.dir, src)
    (src / "evidence/inventory-gpus.json").write_text("[]")
    with pytest.raises(RedactError, match="fails its hashes"):
        redact_bundle(src, tmp_path / "out", KEY_A)
    with pytest.raises(RedactError, match="directory of its own"):
        redact_bundle(bundle.dir, bundle.dir, KEY_A)


def test_redacted_evidence_is_consistent_json(bundle: Bundle, tmp_path: Path) -> None:
    out = tmp_path / "public"
    redact_bundle(bundle.dir, out, KEY_A)
    for line in (out / "evidence/lifecycle-events.jsonl").read_text().splitlines():
        ev = json.loads(line)
        assert ev["component"].startswith("rg-") or ev["component"] == "mixed-fleet"
