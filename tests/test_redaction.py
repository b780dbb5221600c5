"""The one redaction, as a class: a secret in any URL form (userinfo, any secret query
parameter in any case), any credential header, a libpq parameter, shown plain, percent-encoded,
JSON-escaped or inside base64, is never in what rackscale prints. A tiers config whose S3
endpoint carries a query string is refused with the token masked, and an internal error's
traceback goes through the same redaction."""

from __future__ import annotations

import base64
import json
import os
import string
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rackscale.cli as cli
from rackscale.redact import MASK, SECRET_HEADERS, SECRET_PARAMS, redact

SECRET = st.text(alphabet=string.ascii_letters + string.digits + "-_.~", min_size=8,
                 max_size=24).filter(lambda s: any(c.isdigit() for c in s)
                                     and any(c.isalpha() for c in s))


def _case(name: str, flips: list[bool]) -> str:
    return "".join(c.upper() if f else c for c, f in zip(name, flips + [False] * len(name),
                                                         strict=False))


@st.composite
def exposures(draw: st.DrawFn) -> tuple[str, str]:
    """(text that shows a secret by its context, the secret)."""
    s = draw(SECRET)
    flips = draw(st.lists(st.booleans(), max_size=30))
    form = draw(st.sampled_from(["userinfo", "query", "header", "basic", "libpq"]))
    if form == "userinfo":
        scheme = draw(st.sampled_from(["http", "https", "postgresql+psycopg", "s3", "redis"]))
        text = f"{scheme}://ops:{s}@host.example:8333/bucket"
    elif form == "query":
        name = _case(draw(st.sampled_from(sorted(SECRET_PARAMS))), flips)
        text = f"http://host:8333/b?region=x&{name}={s}&other=1"
    elif form == "libpq":
        name = draw(st.sampled_from(["password", "sslpassword", "token"]))
        text = f"host=db port=5432 {name}={s} dbname=r"
    elif form == "header":
        name = _case(draw(st.sampled_from(SECRET_HEADERS)), flips)
        text = f'{{"{name}": "{s}", "status": 500}}'
    else:
        pair = base64.b64encode(f"bmcops:{s}".encode()).decode()
        text = f"Authorization: Basic {pair}\nseen password {s}"
    return text, s


def _visible(out: str, secret: str) -> bool:
    """Whether `secret` can be read back from `out` by undoing a usual encoding."""
    forms = [out, urllib.parse.unquote_plus(out), out.replace("\\/", "/")]
    for word in out.replace('"', " ").split():
        for dec in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                forms.append(dec(word + "=" * (-len(word) % 4)).decode())
            except (ValueError, UnicodeDecodeError):
                continue
    return any(secret in f for f in forms)


WRAPS = ["plain", "percent", "json", "base64"]


@settings(max_examples=300, deadline=None)
@given(exposures(), st.sampled_from(WRAPS))
def test_no_secret_survives_redaction_in_any_form(exposure: tuple[str, str], wrap: str) -> None:
    text, secret = exposure
    known: list[str] = []
    if wrap == "percent":  # a server that echoes the request URL-encoded
        text = "echo=" + urllib.parse.quote(text, safe="")
    elif wrap == "json":
        text = json.dumps({"error": text})
    elif wrap == "base64":  # only a secret the caller knows can be found inside base64
        text = "body " + base64.b64encode(text.encode()).decode()
        known = [secret]
    out = redact(text, secrets=known)
    assert not _visible(out, secret), (text, out)
    assert MASK in out


@pytest.mark.parametrize("text", [
    "pass=12 fail=0 sort_key=a", "Bearer authentication required",
    "checkpoint step-00000003 in http://host:8333/bucket", "sqlite:///rackscale-data/r.db",
])
def test_what_is_no_secret_stays_readable(text: str) -> None:
    assert redact(text) == text


def _rackscale(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-m", "rackscale", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_an_endpoint_with_a_query_string_is_refused_with_the_token_masked(
        tmp_path: Path) -> None:
    cfg = tmp_path / "tiers.yaml"
    cfg.write_text("local_dir: ./local\nregion: {name: us-east, kind: s3, endpoint: "
                   "'http://127.0.0.1:1/?token=TOKPLANTED9', bucket: b, access_key: AKPLANT5, "
                   "secret_key: SKPLANTED6}\n")
    for args in (["checkpoint", "ls"], ["checkpoint", "ls", "--json"]):
        r = _rackscale(*args, "--config", str(cfg), cwd=tmp_path)
        assert r.returncode == 2, r.stderr
        both = r.stdout + r.stderr
        assert "Traceback" not in both and "TOKPLANTED9" not in both, both
        assert "token=***" in both and "query string" in both


def test_an_internal_error_prints_a_redacted_traceback(monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    pair = base64.b64encode(b"ops:BASICPLANT7").decode()

    def broken() -> None:
        raise RuntimeError(f"GET https://u:URLPLANT1@h/x?Token=QPLANT2 failed; headers "
                           f"{{'Authorization': 'Basic {pair}', 'X-Api-Key': 'KEYPLANT3'}}")

    monkeypatch.setattr(cli, "build_app", lambda nouns=None: broken)
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "RuntimeError" in err and "internal error" in err
    for planted in ("URLPLANT1", "QPLANT2", pair, "BASICPLANT7", "KEYPLANT3"):
        assert planted not in err, err
