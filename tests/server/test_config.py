"""`rackscale serve` refuses unsafe setups before it binds anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology
from rackscale.server import TOKEN_ENV, ServerConfig, ServerConfigError, read_token
from rackscale.server.api import check_id
from rackscale.server.errors import ApiError

TOKEN = "a-long-enough-token-0123456789"


def _serve(tmp_path: Path, *args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["serve", "--db", f"sqlite:///{tmp_path}/x.db", *args],
                             env={TOKEN_ENV: None})  # type: ignore[dict-item]
    return res.exit_code, res.output


def test_a_token_on_the_command_line_is_refused(tmp_path: Path) -> None:
    code, out = _serve(tmp_path, "--token", TOKEN)
    assert code == 2 and "command line is refused" in out and TOKEN not in out


@pytest.mark.parametrize("args,needle", [
    (["--host", "0.0.0.0"], "not a loopback address"),
    (["--host", "10.1.2.3", "--allow-remote"], "needs a token"),
])
def test_non_loopback_needs_the_flag_and_a_token(tmp_path: Path, args: list[str],
                                                 needle: str) -> None:
    code, out = _serve(tmp_path, *args)
    assert code == 2 and needle in out, out


def test_config_rules() -> None:
    assert ServerConfig(host="::1").host == "::1"
    assert ServerConfig(host="0.0.0.0", allow_remote=True, token=TOKEN).allow_remote
    with pytest.raises(ServerConfigError, match="at least 16"):
        ServerConfig(token="short")
    assert TOKEN not in repr(ServerConfig(token=TOKEN))


def test_token_file_rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    f.chmod(0o644)
    with pytest.raises(ServerConfigError, match="chmod 600"):
        read_token(str(f))
    f.chmod(0o600)
    assert read_token(str(f)) == TOKEN
    f.write_text("\n")
    with pytest.raises(ServerConfigError, match="empty"):
        read_token(str(f))
    with pytest.raises(ServerConfigError, match="--token-file"):
        read_token(str(tmp_path / "missing"))
    assert read_token(None) is None
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert read_token(None) == TOKEN


_SEG = st.text(alphabet=st.sampled_from("abcXYZ019._-"), min_size=1, max_size=8)


@given(segs=st.lists(st.one_of(_SEG, st.sampled_from(["..", ".", "", "a\\b", "a\x00"])),
                     min_size=1, max_size=6))
def test_ids_with_dot_segments_or_empty_segments_are_refused(segs: list[str]) -> None:
    cid = "/".join(segs)
    bad = any(s in ("", ".", "..") or not s[0].isalnum() or "\\" in s or "\x00" in s
              for s in segs)
    if bad:
        with pytest.raises(ApiError) as err:
            check_id(cid)
        assert err.value.status == 400
    else:
        assert check_id(cid) == cid


def test_every_seed_fleet_id_is_accepted(seed_topo: Topology) -> None:
    for cid in seed_topo.ids:
        assert check_id(cid) == cid
