"""Bad fleet specs: each exits 2 naming the file, line, field and the fix; nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import SpecError, load_fleet, parse_fleet
from rackscale.store import Store

GOOD = """\
name: lab
regions:
  - name: us-east
    racks: [{template: vr-nvl72, count: 2}]
  - name: us-west
    racks:
      - {template: gb200-nvl72, names: [r07, r09]}
      - {template: hgx-h100, count: 1, nodes_per_rack: 2}
"""

BAD = {
    "yaml_syntax": ("name: lab\nregions:\n  - name: us-east\n    racks: [{template: vr-nvl72,"
                    " count: 2}\n", 5, ["YAML syntax error", "at line 4"]),
    "unknown_template": ("name: lab\nregions:\n  - name: a\n    racks:\n"
                         "      - {template: vr-nvl27, count: 1}\n", 5,
                         ["regions[0].racks[0].template", "valid templates:", "vr-nvl72",
                          "hgx-b200"]),
    "duplicate_region": ("name: lab\nregions:\n  - name: a\n    racks: [{template: vr-nvl72, "
                         "count: 1}]\n  - name: a\n    racks: [{template: vr-nvl72, count: 1}]\n",
                         5, ["regions[1].name", "already defined", "unique name"]),
    "duplicate_rack": ("name: lab\nregions:\n  - name: a\n    racks:\n"
                       "      - {template: vr-nvl72, names: [r01]}\n"
                       "      - {template: vr-nvl72, names: [r02,\n          r01]}\n", 7,
                       ["names[1]", "'r01' is already named", "unique name"]),
    "count_zero": ("name: lab\nregions:\n  - name: a\n    racks:\n"
                   "      - template: vr-nvl72\n        count: 0\n", 6,
                   ["regions[0].racks[0].count", "greater than 0", "Fix: use a value above 0"]),
    "count_negative": ("name: lab\nregions:\n  - name: a\n    racks:\n"
                       "      - {template: vr-nvl72, count: -3}\n", 5, ["count", "Fix"]),
    "unknown_key": ("name: lab\nregions:\n  - name: a\n    rack_count: 3\n"
                    "    racks: [{template: vr-nvl72, count: 1}]\n", 4,
                    ["regions[0].rack_count", "Extra inputs are not permitted",
                     "remove this key or fix its spelling"]),
    "nodes_on_nvl72": ("name: lab\nregions:\n  - name: a\n    racks:\n"
                       "      - {template: vr-nvl72, count: 1, nodes_per_rack: 4}\n", 5,
                       ["HGX templates only"]),
    "missing_regions": ("name: lab\n", 1, ["regions", "Field required", "add this key"]),
    "empty": ("", 1, ["empty"]),
}


def test_good_spec() -> None:
    spec = parse_fleet(GOOD, "good.yaml")
    names = [n for n, _ in spec.regions[1].rack_names()]
    assert names == ["r07", "r09", "r01"]


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_message(case: str) -> None:
    text, line, fragments = BAD[case]
    with pytest.raises(SpecError) as err:
        parse_fleet(text, "fleet.yaml")
    msg = str(err.value)
    assert msg.startswith(f"fleet.yaml:{line}:"), msg
    for f in fragments:
        assert f in msg, (f, msg)


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_spec_cli_exit_2_writes_nothing(case: str, tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(BAD[case][0])
    db = tmp_path / "inv.db"
    runner = CliRunner()
    for args in (["fleet", "validate", "--fleet", str(spec)],
                 ["fleet", "load", "--fleet", str(spec), "--db", f"sqlite:///{db}"]):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, res.output
        assert f"{spec}:{BAD[case][1]}:" in res.output
        assert "Traceback" not in res.output
    assert not db.exists()  # validation happens before the store is even opened


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_fleet("/nonexistent/fleet.yaml")


def test_store_untouched_by_bad_spec_after_good_load(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/inv.db"
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(GOOD)
    bad.write_text(BAD["unknown_template"][0])
    runner = CliRunner()
    assert runner.invoke(app, ["fleet", "load", "--fleet", str(good), "--db", db]).exit_code == 0
    before = Store(db).counts_by_kind(), Store(db).count_events()
    assert runner.invoke(app, ["fleet", "load", "--fleet", str(bad), "--db", db]).exit_code == 2
    assert (Store(db).counts_by_kind(), Store(db).count_events()) == before
