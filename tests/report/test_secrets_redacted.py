"""No secret leaves a run: credentials planted in a PostgreSQL URL (`?password=`, a password
holding `@`), in an S3 endpoint's userinfo and in a BMC's echo of the Authorization header are
looked for in every output of the commands and in every file they write; none is found."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.redact import redact, redact_url
from rackscale.server import ServerConfig, create_app
from rackscale.store import Store
from tests.conftest import free_port
from tests.pg import fresh_database

DB_SECRET = "PLANTED1"
AT_SECRET = "S3c@ret"  # the password of ops:S3c@ret@host
S3_USER, S3_SECRET = "AKPLANTED2", "S3PLANTED3"
BMC_USER, BMC_SECRET = "bmcops", "BMCPLANTED4"
# Every planted string, and what a misparse would leave of one (`ret@` of S3c@ret, `:S3c` or
# `S3c@` of its first half). A fragment is looked for with its delimiter: a bare "S3c" turns up
# by chance in report.html's base64 plots (CI found it there once).
PLANTED = [DB_SECRET, AT_SECRET, ":S3c", "S3c@", "ret@", S3_USER, S3_SECRET, BMC_SECRET,
           base64.b64encode(f"{BMC_USER}:{BMC_SECRET}".encode()).decode()]


def _leaks(text_: str) -> list[str]:
    return [s for s in PLANTED if s in text_]


# ----------------------------------------------------------------------- the one function
@pytest.mark.parametrize(("raw", "shown"), [
    ("postgresql+psycopg://ops@h/db?password=PLANTED1&sslmode=require",
     "postgresql+psycopg://ops@h/db?password=***&sslmode=require"),
    ("postgresql+psycopg://ops:S3c@ret@h:5432/db", "postgresql+psycopg://ops:***@h:5432/db"),
    ("postgresql://h/db?SSLPassword=x1234&Token=t1234", "postgresql://h/db?SSLPassword=***&Token=***"),
    ("sqlite:///rackscale-data/rackscale.db", "sqlite:///rackscale-data/rackscale.db"),
])
def test_redact_url(raw: str, shown: str) -> None:
    assert redact_url(raw) == shown


def test_redact_text_masks_headers_and_decoded_basic_credentials() -> None:
    token = base64.b64encode(b"bmcops:BMCPLANTED4").decode()
    body = (f'{{"echo": {{"Authorization": "Basic {token}"}}, "seen": "bmcops:BMCPLANTED4", '
            '"pw": "BMCPLANTED4"}')
    out = redact(body)
    assert _leaks(out) == [] and '"Authorization": "Basic ***"' in out
    assert redact("Authorization: Bearer abc.def.123456") == "Authorization: Bearer ***"
    assert redact("Bearer authentication required") == "Bearer authentication required"
    assert redact("pass=12 fail=0 sort_key=a") == "pass=12 fail=0 sort_key=a"  # not secrets
    assert redact("host=h password=PLANTED1 dbname=d") == "host=h password=*** dbname=d"
    assert redact("driver said BMCPLANTED4", secrets=["BMCPLANTED4"]) == "driver said ***"
    assert redact("an S3 endpoint http://AKPLANTED2:S3PLANTED3@h:1/b") == \
        "an S3 endpoint http://AKPLANTED2:***@h:1/b"
    assert redact_url("http://AKPLANTED2:S3PLANTED3@h:1/b", keep_user=False) == "http://***@h:1/b"


# ------------------------------------------------------------------- a run, end to end
class _EchoBmc(BaseHTTPRequestHandler):
    """A BMC whose error body echoes the request's Authorization header (and decodes it)."""

    def do_GET(self) -> None:
        auth = self.headers.get("Authorization", "")
        decoded = base64.b64decode(auth.split(" ", 1)[-1]).decode() if auth else ""
        body = json.dumps({"error": "internal", "Authorization": auth,
                           "credentials": decoded}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def echo_bmc() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EchoBmc)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def _fresh_db(postgres_url: str) -> str:
    return fresh_database(postgres_url, "redact")


def _rs(out: list[str], *args: str) -> int:
    r = CliRunner().invoke(app, list(args))
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    out.append(f"$ {args[0]} {args[1]}\n{r.stdout}{r.stderr}")  # not args: secrets
    return r.exit_code


def _serve_start_line(db: str, tmp: Path) -> str:
    """`rackscale serve`'s first line on stderr (the server is stopped once it is printed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "rackscale", "serve", "--db", db,
                             "--port", str(free_port())], cwd=tmp, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        return proc.stderr.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.postgres
def test_no_planted_secret_in_any_output_or_file(postgres_url: str, tmp_path: Path,
                                                 echo_bmc: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    db = _fresh_db(postgres_url) + f"?password={DB_SECRET}"
    host = postgres_url.split("@", 1)[1].split("/", 1)[0]
    at_db = f"postgresql+psycopg://ops:{AT_SECRET}@{host}/rackscale"
    out: list[str] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RACKSCALE_BMC_USER", BMC_USER)
    monkeypatch.setenv("RACKSCALE_BMC_PASSWORD", BMC_SECRET)
    bundle, key = tmp_path / "bundle", tmp_path / "k" / "ops.pem"
    assert _rs(out, "fleet", "load", "--fleet", "seed-504", "--db", db) == 0, out[-1]
    assert _rs(out, "fleet", "load", "--fleet", "seed-504", "--db", db, "--json") == 0
    assert _rs(out, "certify", "run", "--db", db, "--repeats", "2") in (0, 1), out[-1]
    assert _rs(out, "report", "build", "--db", db, "--out", str(bundle)) == 0, out[-1]
    assert _rs(out, "report", "build", "--db", db, "--out", str(bundle), "--json") == 0
    assert _rs(out, "report", "keygen", "--key", str(key)) == 0
    assert _rs(out, "report", "sign", str(bundle), "--key", str(key)) == 0, out[-1]
    assert _rs(out, "report", "verify", str(bundle), "--pubkey", f"{key}.pub") == 0, out[-1]
    # errors: a password holding @, refused by the server; a BMC that echoes the header
    assert _rs(out, "fleet", "load", "--fleet", "seed-504", "--db", at_db) == 2
    assert _rs(out, "fleet", "load", "--fleet", "seed-504", "--db", at_db, "--json") == 2
    assert _rs(out, "lifecycle", "run", "--once", "--db", db, "--redfish", echo_bmc) == 2
    assert "HTTP 500" in out[-1], out[-1]
    out.append(_serve_start_line(db, tmp_path))
    assert "rackscale serve" in out[-1], out[-1]

    tiers = tmp_path / "tiers.json"
    tiers.write_text(json.dumps({"local_dir": str(tmp_path / "nvme"), "region": {
        "name": "region", "kind": "s3", "bucket": "b", "timeout_s": 1,
        "endpoint": f"http://{S3_USER}:{S3_SECRET}@127.0.0.1:{free_port()}"}}))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    store = Store(db, readonly=True)
    try:
        client = TestClient(create_app(ServerConfig(db=db, checkpoints=str(tiers)), store))
        for path in ("/api/v1/ledger", "/api/v1/checkpoints", "/api/v1/health",
                     "/api/v1/summary"):
            r = client.get(path)
            out.append(f"GET {path} {r.status_code}\n{r.text}")
            assert r.status_code == 200, out[-1]
        assert "region" in json.loads(out[-3].split("\n", 1)[1])["unreachable"]
    finally:
        store.close()

    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert {"report.json", "report.html", "disclosure.json", "meta.json"} <= \
        {p.name for p in files}
    leaks = {f"output {i}": _leaks(o) for i, o in enumerate(out)}
    leaks |= {str(p): _leaks(p.read_text(errors="replace")) for p in files}
    assert {k: v for k, v in leaks.items() if v} == {}, "\n".join(out)
