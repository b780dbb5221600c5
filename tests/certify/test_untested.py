"""A part an earlier failure left out of the stage that tests it is named as untested, not
passed by silence: on an HGX node, a bad GPU's NIC (a NIC is measured only with its own GPU)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rackscale.certify import Ladder, TwinBackend
from rackscale.cli import app
from rackscale.faults import Fault, TwinHardware, faults_from
from rackscale.fleet import Topology, parse_fleet

HGX = """
name: hgx-held-out
regions:
  - name: a
    racks: [{template: hgx-h200, count: 4}]
"""


def _run(faults: list[Fault]):
    topo = Topology.build(parse_fleet(HGX))
    return topo, Ladder(topo, TwinBackend(TwinHardware(topo, faults_from(faults, topo),
                                                        seed=3))).run()


def test_the_nic_of_a_gpu_that_failed_is_listed_untested_with_why() -> None:
    topo, run = _run([Fault(target="a/r02/n01/gpu3", kind="sdc"),
                      Fault(target="a/r02/n01/nic3", kind="bad_cable", severity=0.5)])
    assert "a/r02/n01/gpu3" in {f.component for f in run.findings}
    assert "a/r02/n01/nic3" not in {f.component for f in run.findings}  # never measured
    untested = {u["part"]: u for u in run.untested}
    assert untested["a/r02/n01/nic3"]["stage"] == 4
    assert "a/r02/n01/gpu3" in untested["a/r02/n01/nic3"]["because"]
    # every NIC listed belongs to a GPU left out of the multi-rack stage, and no more
    for part in untested:
        (g,) = [int(x) for x in topo.affected_gpus(part)]
        assert topo.affected_gpus(part).size == 1 and g >= 0
    assert run.summary()["untested"] == run.untested
    # an untested NIC's GPU never passed the stage, so it is not counted as certified
    assert run.gpus_passed <= run.gpus_total - len(run.untested)


def test_a_clean_fleet_leaves_nothing_untested() -> None:
    _topo, run = _run([])
    assert run.findings == [] and run.untested == []


def test_a_finding_on_the_nic_itself_is_not_also_untested() -> None:
    _topo, run = _run([Fault(target="a/r03/n01/nic2", kind="bad_cable", severity=0.5)])
    assert "a/r03/n01/nic2" in {f.component for f in run.findings}
    assert "a/r03/n01/nic2" not in {u["part"] for u in run.untested}


def _files(tmp_path, monkeypatch) -> str:
    """The fleet and a faults file (an SDC GPU and a bad cable on its own NIC); the db URL."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.yaml").write_text(HGX)
    (tmp_path / "faults.yaml").write_text(
        "faults:\n  - {target: a/r02/n01/gpu3, kind: sdc}\n"
        "  - {target: a/r02/n01/nic3, kind: bad_cable, severity: 0.5}\n")
    return f"sqlite:///{tmp_path / 's.db'}"


@pytest.mark.parametrize("json_out", [True, False])
def test_certify_run_says_what_went_untested(tmp_path, monkeypatch, json_out: bool) -> None:
    db = _files(tmp_path, monkeypatch)
    r = CliRunner().invoke(app, ["fleet", "load", "--fleet", "fleet.yaml", "--db", db])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["certify", "run", "--faults", "faults.yaml", "--seed", "3",
                                 "--db", db, *(["--json"] if json_out else [])])
    assert r.exit_code == 1, r.output
    if json_out:
        doc = json.loads(r.output)
        assert "a/r02/n01/nic3" in {u["part"] for u in doc["untested"]}
    else:
        assert "untested" in r.output and "a/r02/n01/nic3" in r.output


def test_the_report_lists_the_untested_parts(tmp_path, monkeypatch) -> None:
    db = _files(tmp_path, monkeypatch)
    for args in (["fleet", "load", "--fleet", "fleet.yaml"],
                 ["certify", "run", "--faults", "faults.yaml", "--seed", "3"],
                 ["report", "build", "--out", "rep"]):
        r = CliRunner().invoke(app, [*args, "--db", db])
        assert r.exit_code in (0, 1), r.output
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert "a/r02/n01/nic3" in {u["part"] for u in doc["certification"]["payload"]["untested"]}
    html = (tmp_path / "rep" / "report.html").read_text()
    assert 'id="untested"' in html and "a/r02/n01/nic3" in html
