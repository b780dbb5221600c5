"""What `report verify` and `report sign` refuse as bad input (exit 2, naming the file): links
out of the bundle, files over the size cap, JSON nested past the limit, a report that fails
its schema; a garbage signature is a failed verification (exit 1); and the verdict says what
it vouches for (report.html is not among it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.report.bundle import MAX_FILE_BYTES

from .bundles import Bundle, make_bundle


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return make_bundle(tmp_path_factory.mktemp("verify-input"))


def _copy(bundle: Bundle, dst: Path) -> Path:
    shutil.copytree(bundle.dir, dst)
    return dst


def _verify(d: Path, pub: Path, *extra: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["report", "verify", str(d), "--pubkey", str(pub), *extra])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, " ".join((r.stdout + r.stderr).split())


def _link_out(path: Path, outside: Path) -> None:
    """Replace `path` by a link to an identical copy outside the bundle (so only the link,
    not the bytes, is wrong)."""
    if path.is_dir():
        shutil.copytree(path, outside)
        shutil.rmtree(path)
    else:
        shutil.copy(path, outside)
        path.unlink()
    path.symlink_to(outside)


@pytest.mark.parametrize("name", ["evidence/fleet.json", "evidence", "report.json",
                                  "disclosure.json", "evidence/manifest.json"])
def test_a_link_out_of_the_bundle_is_refused(signed: Bundle, tmp_path: Path, name: str) -> None:
    d = _copy(signed, tmp_path / "b")
    _link_out(d / name, tmp_path / "outside")
    rc, out = _verify(d, signed.pub)
    assert rc == 2, out
    assert "symbolic link" in out and Path(name).name in out and "Traceback" not in out


def test_an_oversized_file_is_refused_before_it_is_read(signed: Bundle, tmp_path: Path) -> None:
    d = _copy(signed, tmp_path / "b")
    with open(d / "evidence" / "fleet.json", "r+b") as fh:  # sparse: no disk is used
        fh.truncate(MAX_FILE_BYTES + 1)
    rc, out = _verify(d, signed.pub)
    assert rc == 2 and "fleet.json" in out and "256 MiB" in out, out


def test_deeply_nested_json_is_bad_input(signed: Bundle, tmp_path: Path) -> None:
    for depth in (100, 100_000):  # past the limit; past Python's recursion limit
        d = _copy(signed, tmp_path / f"b{depth}")
        (d / "report.json").write_text("[" * depth + "]" * depth)
        rc, out = _verify(d, signed.pub)
        assert rc == 2 and "report.json" in out and "nested too deeply" in out, out


def test_a_garbage_signature_fails_verification(signed: Bundle, tmp_path: Path) -> None:
    d = _copy(signed, tmp_path / "b")
    (d / "signature.json").write_bytes(b"\x00garbage{")
    rc, out = _verify(d, signed.pub)
    assert rc == 1 and "not verified" in out and "signature.json" in out, out


def test_the_verdict_names_what_it_covers_and_not_the_page(signed: Bundle,
                                                           tmp_path: Path) -> None:
    d = _copy(signed, tmp_path / "b")
    page = d / "report.html"
    page.write_text(page.read_text().replace("504", "5040"))  # a forged page
    rc, out = _verify(d, signed.pub)
    assert rc == 0, out
    assert "verified report.json, disclosure.json, evidence/ (" in out
    assert "report.html is not covered" in out
    r = CliRunner().invoke(app, ["report", "verify", str(d), "--pubkey", str(signed.pub),
                                 "--json"])
    got = json.loads(r.stdout)
    assert got["not_covered"] == ["report.html"] and "report.json" in got["covered"]
    # --update-html renders the page again from the verified report.json: the forgery is gone
    rc, out = _verify(d, signed.pub, "--update-html")
    assert rc == 0 and "5040" not in page.read_text()


@pytest.mark.parametrize("command", ["sign", "verify"])
def test_a_report_off_its_schema_is_refused_before_anything_is_written(
        signed: Bundle, tmp_path: Path, command: str) -> None:
    d = _copy(signed, tmp_path / "b")
    doc = json.loads((d / "report.json").read_text())
    del doc["ledger"]
    (d / "report.json").write_text(json.dumps(doc))
    (d / "signature.json").unlink()
    before = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    args = (["report", "sign", str(d), "--key", str(signed.key)] if command == "sign" else
            ["report", "verify", str(d), "--pubkey", str(signed.pub), "--update-html"])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.stdout + r.stderr + repr(r.exception)
    assert "report schema" in r.stdout + r.stderr
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == before
    assert not (d / "signature.json").exists()

