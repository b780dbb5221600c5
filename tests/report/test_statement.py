"""The report as a verifiable statement: a signed bundle verifies, and every kind of tampering
(a changed evidence byte, a changed figure, a swapped signature, a missing file, evidence of
another run) fails verification and names what is wrong."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rackscale.report.bundle import BundleError, canonical, manifest_of, root_of
from rackscale.report.sign import KeyFileError, keygen, sign_bundle
from rackscale.report.statement import ReportDirError
from rackscale.report.verify import verify_bundle

from .bundles import Bundle, copy_of, make_bundle

EVIDENCE_FILES = ["certify-run.json", "findings.jsonl", "fleet-event.json", "fleet.json",
                  "interlocks.jsonl", "inventory-gpus.json",
                  "lifecycle-events.jsonl", "meta.json",
                  "other-simulation.json", "results.jsonl", "simulate-run.json",
                  "simulate-sweep.json", "states.jsonl", "storage-whatif.json"]


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return make_bundle(tmp_path_factory.mktemp("statement"), price=2.5)


@pytest.fixture(scope="module")
def other_run(tmp_path_factory: pytest.TempPathFactory, bundle: Bundle) -> Bundle:
    """Another run of the same fleet (another certification run and ETTR), same key."""
    return make_bundle(tmp_path_factory.mktemp("other"), run_id="c-0002", ettr=0.91,
                       key=bundle.key)


def evidence_names(b: Bundle | Path) -> list[str]:
    d = b.dir if isinstance(b, Bundle) else b
    return [r["path"] for r in json.loads((d / "evidence/manifest.json").read_text())["files"]]


def failed(result) -> dict[str, str]:
    return {c.name: c.detail for c in result.checks if not c.ok}


def test_a_signed_bundle_verifies(bundle: Bundle) -> None:
    result = verify_bundle(bundle.dir, bundle.pub)
    assert result.ok, result.first_problem
    assert result.root == bundle.doc["evidence"]["root"]
    names = [c.name for c in result.checks]
    assert names[:2] == ["signature", "signed bundle"] and "recompute" in names
    assert "disclosure schema" in names


def test_the_report_names_its_bundle_by_the_manifest_root(bundle: Bundle) -> None:
    manifest = json.loads((bundle.dir / "evidence/manifest.json").read_text())
    assert bundle.doc["evidence"]["root"] == root_of(manifest)
    paths = [r["path"] for r in manifest["files"]]
    assert paths == sorted(paths) and len(paths) == bundle.doc["evidence"]["files"]
    for row in manifest["files"]:  # one file per piece, each hashed
        data = (bundle.dir / "evidence" / row["path"]).read_bytes()
        assert len(data) == row["bytes"]
    assert {"fleet.json", "inventory-gpus.json", "lifecycle-events.jsonl", "findings.jsonl",
            "results.jsonl", "states.jsonl", "simulate-run.json", "meta.json"} <= set(paths)


def test_the_same_evidence_gives_the_same_bytes(bundle: Bundle, tmp_path: Path) -> None:
    again = make_bundle(tmp_path, price=2.5, sign=False)
    # new store, new event times: the root differs, but the layout and the ledger do not
    assert evidence_names(again) == evidence_names(bundle)
    assert again.counts == bundle.counts
    files = {p: (again.dir / "evidence" / p).read_bytes() for p in evidence_names(again)}
    assert root_of(manifest_of(files)) == again.doc["evidence"]["root"]
    assert canonical({"b": 1, "a": [1.5, None]}) == b'{"a":[1.5,null],"b":1}'


def test_the_bundle_holds_every_piece(bundle: Bundle) -> None:
    assert evidence_names(bundle) == EVIDENCE_FILES


@pytest.mark.parametrize("name", EVIDENCE_FILES)
def test_a_changed_byte_in_any_evidence_file_fails_and_names_it(bundle: Bundle, tmp_path: Path,
                                                               name: str) -> None:
    d = copy_of(bundle, tmp_path / "b")
    path = d / "evidence" / name
    data = bytearray(path.read_bytes())
    if data:
        data[len(data) // 2] ^= 0x01
    else:  # an empty piece (no events of its kind): one byte added is a change too
        data += b"\n"
    path.write_bytes(bytes(data))
    result = verify_bundle(d, bundle.pub)
    assert not result.ok
    assert failed(result)["evidence hashes"].startswith(f"evidence/{name}: sha256 ")
    assert result.first_problem.startswith(f"evidence hashes: evidence/{name}")


def test_a_changed_number_in_report_json_names_the_file_and_the_figure(bundle: Bundle,
                                                                       tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    doc = json.loads((d / "report.json").read_text())
    step = next(s for s in doc["ledger"] if s["key"] == "healthy")
    step["count"] += 1
    (d / "report.json").write_text(json.dumps(doc, indent=2))
    result = verify_bundle(d, bundle.pub)
    bad = failed(result)
    assert "changed after signing" in bad["report.json"]
    assert bad["recompute"] == (f"ledger step 4 (healthy): count: report.json says "
                                f"{int(bundle.counts['healthy']) + 1}, the evidence gives "
                                f"{int(bundle.counts['healthy'])}")


def test_a_changed_figure_outside_the_ledger_is_named_by_its_path(bundle: Bundle,
                                                                  tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    doc = json.loads((d / "report.json").read_text())
    doc["racks"][2]["usable_gpus"] += 4
    doc["cost"]["total_per_month"] = 1.0
    (d / "report.json").write_text(json.dumps(doc))
    assert failed(verify_bundle(d, bundle.pub))["recompute"].startswith(
        "report.json racks[2].usable_gpus: says")


def test_a_swapped_signature_fails(bundle: Bundle, other_run: Bundle, tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    shutil.copy(other_run.dir / "signature.json", d / "signature.json")
    result = verify_bundle(d, bundle.pub)
    bad = failed(result)
    assert "signature" not in bad  # a genuine signature ...
    assert "a signature of another bundle" in bad["signed bundle"]  # ... of another bundle
    assert result.first_problem.startswith("signed bundle:")


def test_a_forged_signature_and_another_key_fail(bundle: Bundle, tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    sig = json.loads((d / "signature.json").read_text())
    raw = bytearray(base64.b64decode(sig["signature"]))
    raw[0] ^= 0xFF
    sig["signature"] = base64.b64encode(bytes(raw)).decode()
    (d / "signature.json").write_text(json.dumps(sig))
    assert "bad signature" in failed(verify_bundle(d, bundle.pub))["signature"]
    _, other_pub, _ = keygen(tmp_path / "k2.pem")
    bad = failed(verify_bundle(bundle.dir, other_pub))
    assert "not by the given public key" in bad["signature"]


@pytest.mark.parametrize("missing", ["evidence/states.jsonl", "evidence/fleet.json",
                                     "disclosure.json", "signature.json"])
def test_a_missing_file_fails_and_names_it(bundle: Bundle, tmp_path: Path, missing: str) -> None:
    d = copy_of(bundle, tmp_path / "b")
    (d / missing).unlink()
    result = verify_bundle(d, bundle.pub)
    assert not result.ok
    assert missing in result.first_problem and "missing" in result.first_problem


def test_a_missing_report_or_manifest_is_bad_input(bundle: Bundle, tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    (d / "evidence/manifest.json").unlink()
    with pytest.raises(BundleError, match="manifest"):
        verify_bundle(d, bundle.pub)
    (d / "report.json").unlink()
    with pytest.raises(ReportDirError, match=r"report\.json: missing"):
        verify_bundle(d, bundle.pub)
    with pytest.raises(KeyFileError, match="no such public key"):
        verify_bundle(bundle.dir, tmp_path / "nope.pub")


def test_evidence_of_another_run_fails(bundle: Bundle, other_run: Bundle, tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    shutil.rmtree(d / "evidence")
    shutil.copytree(other_run.dir / "evidence", d / "evidence")
    result = verify_bundle(d, bundle.pub)
    bad = failed(result)
    assert "evidence of another run" in bad["signed bundle"]
    assert "another run" in bad["evidence root"]
    # the other run's evidence is intact, and gives other figures than this report
    assert "evidence hashes" not in bad and "ledger step" in bad["recompute"]


def test_consistently_rehashed_evidence_is_caught_by_recomputation(bundle: Bundle,
                                                                   tmp_path: Path) -> None:
    """A forger who edits a finding and rewrites the manifest (and report.json's root) still
    fails: the signature does not cover the new root, and the ledger recomputed from the
    edited evidence disagrees with report.json at the step the finding feeds."""
    d = copy_of(bundle, tmp_path / "b")
    path = d / "evidence/findings.jsonl"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    lines = [x for x in lines if x["payload"]["kind"] != "slow_gpu"]  # hide the slow GPU
    path.write_bytes(b"".join(canonical(x) + b"\n" for x in lines))
    files = {p: (d / "evidence" / p).read_bytes() for p in evidence_names(d)}
    manifest = manifest_of(files)
    (d / "evidence/manifest.json").write_text(json.dumps(manifest))
    doc = json.loads((d / "report.json").read_text())
    doc["evidence"]["root"] = root_of(manifest)
    (d / "report.json").write_text(json.dumps(doc))
    bad = failed(verify_bundle(d, bundle.pub))
    assert "evidence hashes" not in bad and "evidence root" not in bad
    assert "signed bundle" in bad
    assert bad["recompute"].startswith("ledger step 4 (healthy): count:")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_flipping_random_bytes_of_random_evidence_files_always_fails(
        bundle: Bundle, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    names = evidence_names(bundle)
    d = copy_of(bundle, tmp_path_factory.mktemp("flip") / "b")
    touched = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
    for name in touched:
        path = d / "evidence" / name
        before = path.read_bytes()
        buf = bytearray(before) or bytearray(b"\n")  # an empty piece grows a byte
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(buf) - 1))
            buf[at] ^= data.draw(st.integers(1, 255))
        # two flips of one byte by the same bits undo each other: that file is unchanged
        assume(bytes(buf) != before)
        path.write_bytes(bytes(buf))
    result = verify_bundle(d, bundle.pub)
    assert not result.ok
    detail = failed(result)["evidence hashes"]
    assert all(f"evidence/{n}" in detail for n in touched)
    assert "not recomputed" in failed(result)["recompute"]


def test_a_rebuild_removes_the_old_signature(bundle: Bundle, tmp_path: Path) -> None:
    assert (copy_of(bundle, tmp_path / "report") / "signature.json").is_file()
    again = make_bundle(tmp_path, name="report", sign=False, key=bundle.key)
    assert not (again.dir / "signature.json").exists()
    assert "not signed" in verify_bundle(again.dir, bundle.pub).first_problem
    sign_bundle(again.dir, bundle.key)
    assert verify_bundle(again.dir, bundle.pub).ok


def test_a_malformed_event_with_a_matching_hash_is_named_by_its_line(bundle: Bundle,
                                                                     tmp_path: Path) -> None:
    d = copy_of(bundle, tmp_path / "b")
    path = d / "evidence/findings.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[1])
    row["payload"] = ["not", "an", "object"]
    lines[1] = canonical(row).decode()
    path.write_text("\n".join(lines) + "\n")
    files = {p: (d / "evidence" / p).read_bytes() for p in evidence_names(d)}
    (d / "evidence/manifest.json").write_text(json.dumps(manifest_of(files)))
    bad = failed(verify_bundle(d, bundle.pub))
    assert bad["recompute"] == ("the evidence cannot be read: evidence/findings.jsonl:2: not an "
                                "event (seq must be an integer, payload an object)")
