"""The faults file: validation with file:line errors, the shipped demo file, the twin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rackscale
from rackscale.faults import (
    FAULT_KINDS,
    Fault,
    TwinHardware,
    demo_faults_path,
    faults_from,
    get_kind,
    load_faults,
    parse_faults,
)
from rackscale.fleet import SpecError, Topology, seed_fleet


def cli_env() -> dict[str, str]:
    """Run the CLI from this checkout's sources, whatever the venv's editable install says."""
    return os.environ | {"PYTHONPATH": str(Path(rackscale.__file__).parents[1])}


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology.build(seed_fleet())


def test_demo_file_holds_the_required_kinds(topo: Topology) -> None:
    ff = load_faults(demo_faults_path(), topo)
    kinds = {f.kind for f in ff.faults}
    assert {"slow_gpu", "sdc", "nvlink_switch_down", "bad_cable", "leaf_degraded",
            "coolant_flow_low", "flapping"} <= kinds


@pytest.mark.parametrize(("text", "needle"), [
    ("faults:\n  - {target: us-east/r01/c01/gpu0, kind: slow_gpu}\n",
     "<t>:2: faults[0]: slow_gpu needs a severity"),
    ("faults:\n  - {target: us-east/r01/c01/gpu0, kind: slowgpu, severity: 0.5}\n",
     "unknown fault kind 'slowgpu'; valid kinds: slow_gpu"),
    ("faults:\n  - target: us-east/r01/c01/gpu0\n    kind: sdc\n    severity: 0.5\n",
     "sdc is an on/off fault; remove severity"),
    ("faults:\n  - {target: us-east/r01/c01/gpu0, kind: slow_gpu, severity: 1.5}\n",
     "faults[0].severity"),
    ("faults:\n\n  - {target: us-east/r09/c01/gpu0, kind: gpu_dead}\n",
     "<t>:3: faults[0].target: unknown component id 'us-east/r09/c01/gpu0'"),
    ("faults:\n  - {target: us-east/r01/c01/nic0, kind: slow_gpu, severity: 0.5}\n",
     "us-east/r01/c01/nic0 is a nic, but slow_gpu sits on a gpu"),
    ("faults:\n  - {target: us-east/r01/c01/nic0, kind: flapping, of: bad_cable}\n",
     "a flapping fault needs `of`"),
    ("faults:\n  - {target: us-east/r01/c01/gpu0, kind: gpu_dead}\n"
     "  - {target: us-east/r01/c01/gpu0, kind: gpu_dead}\n", "<t>:3: faults[1]: gpu_dead on"),
    ("faults: [\n", "YAML syntax error"),
    ("faults:\n  - {target: us-east/r01/c01/gpu0, kind: sdc, colour: red}\n", "colour"),
])
def test_bad_faults_file_names_line_and_fix(topo: Topology, text: str, needle: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_faults(text, topo, "<t>")
    assert needle in str(exc.value)


def test_unknown_kind_lists_valid_kinds() -> None:
    with pytest.raises(Exception, match="valid kinds: slow_gpu, hbm_degraded"):
        get_kind("nope")


def test_every_kind_has_a_target_kind_or_is_flapping() -> None:
    for k in FAULT_KINDS.values():
        assert k.target_kinds or k.name == "flapping"


def test_twin_is_deterministic_per_seed_with_about_one_percent_noise(topo: Topology) -> None:
    gpus = np.arange(len(topo.gpu_ids))
    a = TwinHardware(topo, seed=3).gemm(gpus, 0.0)[0]
    b = TwinHardware(topo, seed=3).gemm(gpus, 0.0)[0]
    c = TwinHardware(topo, seed=4).gemm(gpus, 0.0)[0]
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    spread = float(np.std(a) / np.mean(a))
    assert 0.005 < spread < 0.02


def test_flapping_fault_is_present_part_of_the_time(topo: Topology) -> None:
    ff = faults_from([Fault(target="us-east/r01/c01/gpu0", kind="flapping", of="slow_gpu",
                            severity=0.5, duty=0.3)], topo)
    hw = TwinHardware(topo, ff, seed=1, noise=0.0)
    present = [hw.state(t).gemm[0] < 1.0 for t in np.arange(0, 6000, 7.0)]
    assert 0.25 < np.mean(present) < 0.35


def test_coolant_flow_low_throttles_the_whole_rack(topo: Topology) -> None:
    ff = faults_from([Fault(target="us-west/r03/cdu", kind="coolant_flow_low",
                            severity=0.5)], topo)
    hw = TwinHardware(topo, ff, seed=1)
    rack = topo.rack("us-west/r03")
    gpus = np.arange(len(topo.gpu_ids))
    tflops = hw.gemm(gpus, 0.0)[0]
    inside = tflops[rack.gpu_first:rack.gpu_end]
    outside = np.delete(tflops, np.arange(rack.gpu_first, rack.gpu_end))
    assert inside.max() < 0.6 * np.median(outside)


def test_bad_faults_file_exits_2_from_the_cli(tmp_path) -> None:
    bad = tmp_path / "f.yaml"
    bad.write_text("faults:\n  - {target: us-east/r01/c01/gpu0, kind: slow_gpu}\n")
    proc = subprocess.run([sys.executable, "-m", "rackscale", "certify", "run", "--fleet",
                           "seed-504", "--faults", str(bad), "--db",
                           f"sqlite:///{tmp_path}/db.sqlite"], capture_output=True, text=True,
                          timeout=120, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert f"{bad}:2: faults[0]: slow_gpu needs a severity" in proc.stderr
    bad_fleet = tmp_path / "fleet.yaml"
    bad_fleet.write_text("name: x\nregions:\n  - name: a\n"
                         "    racks: [{template: nope, count: 1}]\n")
    proc = subprocess.run([sys.executable, "-m", "rackscale", "certify", "run", "--fleet",
                           str(bad_fleet), "--db", f"sqlite:///{tmp_path}/db.sqlite"],
                          capture_output=True, text=True, timeout=120, env=cli_env())
    assert proc.returncode == 2, proc.stderr
    assert "unknown rack template 'nope'" in proc.stderr


def test_flapping_fault_without_severity_loads_at_the_documented_default(topo: Topology) -> None:
    # The form of the faults-file reference: no severity for the flapped kind.
    ff = parse_faults("faults:\n  - {target: us-east/r03/c14/nic0, kind: flapping, "
                      "of: bad_cable, duty: 0.3}\n", topo)
    (fault,) = ff.faults
    assert fault.severity == 0.5 and fault.effective_kind == "bad_cable"
    # an on/off kind still flaps with no severity, and an explicit one is kept
    assert parse_faults("faults:\n  - {target: us-east/r01/c01/gpu0, kind: flapping, of: sdc, "
                        "duty: 0.5}\n", topo).faults[0].severity is None
    assert parse_faults("faults:\n  - {target: us-east/r01/c01/nic0, kind: flapping, "
                        "of: bad_cable, severity: 0.2, duty: 0.5}\n", topo).faults[0].severity \
        == 0.2
    # and the ladder finds it as what was written: a flapping bad cable
    from rackscale.certify import Ladder, TwinBackend

    run = Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=3))).run()
    assert [(f.component, f.kind, f.evidence.get("of")) for f in run.findings] == [
        ("us-east/r03/c14/nic0", "flapping", "bad_cable")]
