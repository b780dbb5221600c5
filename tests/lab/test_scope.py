"""`certify run --scope ID` (day-2 recertification of one rack or tray), on the twin."""

from __future__ import annotations

import json

import pytest
from lab_rig import FLEET, cli

from rackscale.certify import Ladder, LadderConfig, LadderConfigError, TwinBackend
from rackscale.faults import Fault, TwinHardware, faults_from
from rackscale.fleet import Topology, load_fleet
from rackscale.fleet.topology import UnknownComponent


def _run(scope: str | None):
    topo = Topology.build(load_fleet(FLEET))
    ff = faults_from([Fault(target="lab/r01/c01/gpu1", kind="slow_gpu", severity=0.5),
                      Fault(target="lab/r02/c02/gpu0", kind="nvlink_port_down")], topo)
    return Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=3)),
                  LadderConfig(scope=scope)).run()


def test_whole_fleet_finds_both_faults() -> None:
    run = _run(None)
    assert sorted(f.component for f in run.findings) == ["lab/r01/c01/gpu1", "lab/r02/c02/gpu0"]
    assert run.gpus_total == 8 and run.summary()["scope"] is None


@pytest.mark.parametrize(("scope", "expect", "gpus"), [
    ("lab/r02", ["lab/r02/c02/gpu0"], 4), ("lab/r01", ["lab/r01/c01/gpu1"], 4),
    ("lab/r01/c02", [], 2), ("lab/r01/c01", ["lab/r01/c01/gpu1"], 2)])
def test_scope_certifies_only_its_gpus(scope: str, expect: list[str], gpus: int) -> None:
    run = _run(scope)
    assert sorted(f.component for f in run.findings) == expect
    assert run.gpus_total == gpus and run.summary()["scope"] == scope
    ran = {r.component for r in run.results if r.verdict != "not_run"}
    assert ran and all(c.startswith(scope.rsplit("/", 1)[0] if scope.count("/") == 2
                                    else scope) for c in ran)


def test_scope_must_be_a_region_rack_or_tray() -> None:
    with pytest.raises(LadderConfigError, match="region, rack or tray"):
        _run("lab/r01/c01/gpu0")
    with pytest.raises(UnknownComponent):
        _run("lab/r09")


def test_scope_through_the_cli(tmp_path) -> None:
    p = cli("certify", "run", "--fleet", FLEET, "--scope", "lab/r01/c02", "--json", "--db",
            f"sqlite:///{tmp_path}/d.db", "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["scope"] == "lab/r01/c02" and out["gpus_total"] == 2 and out["findings"] == []
    bad = cli("certify", "run", "--fleet", FLEET, "--scope", "lab/r01/cdu", "--db",
              f"sqlite:///{tmp_path}/d.db")
    assert bad.returncode == 2 and "region, rack or tray" in bad.stderr
