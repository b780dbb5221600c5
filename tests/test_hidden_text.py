"""Hidden characters as a class: every control character (C0 but tab and newline, DEL, C1)
and every bidi or zero-width one (U+202E reorders "exe.txt" into "txt.exe"; U+200B hides a
break) is refused in operator text, and written as its escape on a terminal line, on the
dashboard and in the report page: text from a store, a file or a peer never drives what the
reader sees."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli._common import visible
from rackscale.inputs import INVISIBLE, OperatorTextError, check_operator_text
from rackscale.report.templates import ENV as REPORT_ENV
from rackscale.server.pages import ENV as PAGES_ENV

HIDDEN = sorted({*range(0x20), *range(0x7F, 0xA0), *INVISIBLE} - {ord("\t"), ord("\n")})
BIDI = [0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069, 0x061C]
ZERO_WIDTH = [0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF]


def test_the_class_holds_the_bidi_and_zero_width_characters() -> None:
    assert set(BIDI) | set(ZERO_WIDTH) <= INVISIBLE
    assert not {ord(c) for c in "aZ09 -_./:é中"} & INVISIBLE  # printable text is not in it


def _render_all(text: str) -> dict[str, str]:
    return {"terminal": visible(text),
            "report page": REPORT_ENV.from_string("<p>{{ x }}</p>").render(x=text),
            "dashboard": PAGES_ENV.from_string("<p>{{ x }}</p>").render(x=text)}


@pytest.mark.parametrize("code", HIDDEN, ids=[f"U+{c:04X}" for c in HIDDEN])
def test_each_hidden_character_is_escaped_everywhere_and_refused_in_operator_text(
        code: int) -> None:
    text = f"rack{chr(code)}name"
    for where, out in _render_all(text).items():
        assert chr(code) not in out, where
        escape = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
        assert escape in out, (where, out)
    with pytest.raises(OperatorTextError, match="control characters"):
        check_operator_text(text)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.one_of(st.characters(), st.sampled_from([chr(c) for c in HIDDEN])),
               max_size=40))
def test_no_rendering_of_any_text_carries_a_hidden_character(text: str) -> None:
    for where, out in _render_all(text).items():
        assert not [c for c in out if ord(c) in HIDDEN], where
    # what is neither hidden nor markup comes through as it was
    plain = "".join(c for c in text if ord(c) not in HIDDEN and c not in "<>&'\"\\")
    assert all(c in visible(text) for c in plain)


def test_a_drain_reason_with_a_bidi_override_is_refused(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    runner = CliRunner()
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    r = runner.invoke(app, ["lifecycle", "drain", "us-east/r01/c01", "--db", db,
                            "--reason", "cooling \u202eok\u202c"])
    assert r.exit_code == 2, r.output
    assert "\\u202e" in r.output and "\u202e" not in r.output
