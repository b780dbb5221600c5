"""`report keygen --key PATH` where no key can be written (/proc, a file's child, a directory)
is a clear error with exit 2 naming the path, and writes nothing; for both key kinds."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.errors import UserError
from rackscale.report import keygen, write_redaction_key


def _places(tmp: Path) -> list[Path]:
    (tmp / "afile").write_text("x")
    (tmp / "adir").mkdir(exist_ok=True)
    return [Path("/proc/self/x"), Path("/proc/self"), Path("/dev/null/x"), tmp / "afile" / "k",
            tmp / "adir", Path("/proc/self/fdinfo/k")]


@pytest.mark.parametrize("redaction", [False, True])
def test_a_key_where_none_can_be_written_is_a_clear_error(tmp_path: Path,
                                                           redaction: bool) -> None:
    from rackscale.cli import app

    for place in _places(tmp_path):
        args = ["report", "keygen", "--key", str(place), *(["--redaction"] if redaction else [])]
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2, (place, r.output, r.exception)
        assert "Traceback" not in r.output and str(place) in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]
    assert list((tmp_path / "adir").iterdir()) == []


@pytest.mark.parametrize("write", [keygen, write_redaction_key])
def test_the_library_says_so_too(write: object) -> None:
    with pytest.raises(UserError, match="/proc/self/x: cannot write"):
        write(Path("/proc/self/x"))  # type: ignore[operator]  # both take the path first
