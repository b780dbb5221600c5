"""`rackscale report keygen|sign|verify|redact` and `build --gpu-hour-price` as a user runs
them: exit codes 0 verified / 1 mismatch / 2 bad input, valid --json (in process, and the
verify exit codes once more as a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app

from .bundles import Bundle, make_bundle


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def rs(*args: str, cwd: Path) -> Ran:
    r = CliRunner().invoke(app, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    return Ran(r.exit_code, r.stdout, r.stderr)


def real(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rackscale", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=240, env=os.environ.copy())


@pytest.fixture(scope="module")
def unsigned(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return make_bundle(tmp_path_factory.mktemp("cli"), sign=False)


def test_keygen_sign_verify_round_trip(unsigned: Bundle, tmp_path: Path) -> None:
    key = tmp_path / "k" / "ops.pem"
    r = rs("report", "keygen", "--key", str(key), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert made["public_key"] == f"{key}.pub" and made["key_id"].startswith("ed25519:")
    assert b"PRIVATE KEY" not in Path(made["public_key"]).read_bytes()
    again = rs("report", "keygen", "--key", str(key), cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr + again.stdout

    r = rs("report", "sign", str(unsigned.dir), "--key", str(key), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["key_id"] == made["key_id"]
    html = (unsigned.dir / "report.html").read_text()
    assert made["key_id"] in html and unsigned.doc["evidence"]["root"] in html

    r = rs("report", "verify", str(unsigned.dir), "--pubkey", f"{key}.pub", "--json",
           "--update-html", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(r.stdout)
    assert out["verified"] is True and out["first_problem"] is None
    assert {(c["status"], c["ok"]) for c in out["checks"]} == {("ok", True)}
    assert ">verified</b>" in (unsigned.dir / "report.html").read_text()

    doc = json.loads((unsigned.dir / "report.json").read_text())
    doc["ledger"][1]["count"] = 1
    (unsigned.dir / "report.json").write_text(json.dumps(doc))
    r = real("report", "verify", str(unsigned.dir), "--pubkey", f"{key}.pub", cwd=tmp_path)
    assert r.returncode == 1
    assert "ledger step 2 (installed): count: report.json says 1" in " ".join(r.stdout.split())
    r = rs("report", "verify", str(unsigned.dir), "--pubkey", f"{key}.pub", "--json",
           cwd=tmp_path)
    assert r.returncode == 1 and json.loads(r.stdout)["verified"] is False
    recompute = [c for c in json.loads(r.stdout)["checks"] if c["check"] == "recompute"]
    assert [(c["status"], c["ok"]) for c in recompute] == [("fail", False)]


def test_bad_input_exits_2_without_a_traceback(unsigned: Bundle, tmp_path: Path) -> None:
    key = tmp_path / "ops.pem"
    assert rs("report", "keygen", "--key", str(key), cwd=tmp_path).returncode == 0
    cases = [
        (("report", "verify", str(tmp_path / "none"), "--pubkey", f"{key}.pub"),
         "no such directory"),
        (("report", "verify", str(unsigned.dir), "--pubkey", str(tmp_path / "x.pub")),
         "no such public key"),
        (("report", "verify", str(unsigned.dir), "--pubkey", str(key)), "not a PEM public"),
    ]
    key.chmod(0o644)
    cases.append((("report", "sign", str(unsigned.dir), "--key", str(key)), "chmod 600"))
    for args, words in cases:
        r = rs(*args, cwd=tmp_path)
        text = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 2, (args, text)
        assert words in text and "Traceback" not in text, (args, text)


def test_build_with_a_price_and_redact(tmp_path: Path) -> None:
    b = make_bundle(tmp_path, sign=False)
    db = f"sqlite:///{tmp_path}/cli.db"
    assert rs("fleet", "load", "--fleet", "seed-504", "--db", db, cwd=tmp_path).returncode == 0
    r = rs("report", "build", "--db", db, "--out", str(tmp_path / "priced"),
           "--gpu-hour-price", "2.5", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["cost"]["gpu_hour_price"] == 2.5 and out["evidence"]["root"].startswith("sha256:")
    bad = rs("report", "build", "--db", db, "--out", str(tmp_path / "p2"),
             "--gpu-hour-price", "-1", cwd=tmp_path)
    assert bad.returncode == 2 and "positive" in bad.stdout + bad.stderr

    rkey = tmp_path / "redact.key"
    assert rs("report", "keygen", "--redaction", "--key", str(rkey),
              cwd=tmp_path).returncode == 0
    assert oct(rkey.stat().st_mode & 0o777) == "0o600"
    r = rs("report", "redact", str(b.dir), "--out", str(tmp_path / "pub"), "--redaction-key",
           str(rkey), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ledger"] == b.counts
    r = rs("report", "verify", str(tmp_path / "pub"), "--pubkey", str(b.pub), cwd=tmp_path)
    assert r.returncode == 1 and "not signed" in " ".join(r.stdout.split())


def test_a_check_not_run_is_printed_as_skip_not_ok(capsys: pytest.CaptureFixture[str]) -> None:
    from rackscale.cli.statement import print_verification
    from rackscale.report.verify import Verification

    v = Verification(bundle="b", root="r", key_id="k")
    v.add("signature", None, "valid")
    v.skip("disclosure schema", "jsonschema is not installed")
    print_verification(v)
    out = capsys.readouterr().out
    assert "ok   signature: valid" in out
    assert "skip disclosure schema: not checked" in out and "ok   disclosure" not in out


def test_a_check_not_run_is_a_skip_in_json_not_ok() -> None:
    """`report verify --json`: a skipped check says `skip` and is not `ok`; it fails nothing."""
    from rackscale.report.verify import Verification

    v = Verification(bundle="b", root="r", key_id="k")
    v.add("signature", None, "valid")
    v.skip("disclosure schema", "jsonschema is not installed")
    checks = {c["check"]: c for c in v.as_dict()["checks"]}
    assert checks["signature"]["status"] == "ok" and checks["signature"]["ok"] is True
    skipped = checks["disclosure schema"]
    assert skipped["status"] == "skip" and skipped["ok"] is False
    assert skipped["detail"] == "not checked (jsonschema is not installed)"
    assert v.as_dict()["verified"] is True and v.first_problem is None
    v.add("recompute", "ledger step 2 differs", "")
    assert v.as_dict()["checks"][-1]["status"] == "fail" and v.ok is False
