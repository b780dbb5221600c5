"""The faults file takes values of the right type only, finite numbers, and bounded YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from rackscale.faults import load_faults, parse_faults
from rackscale.fleet import SpecError, Topology, seed_fleet


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology.build(seed_fleet())


@pytest.mark.parametrize("fault,field", [
    ("{target: us-east/r01/c01/gpu0, kind: slow_gpu, severity: false}", "severity"),
    ("{target: us-east/r01/c01/gpu0, kind: slow_gpu, severity: '0.5'}", "severity"),
    ("{target: us-east/r01/c01/gpu0, kind: slow_gpu, severity: .nan}", "severity"),
    ("{target: us-east/r01/c01/nic0, kind: flapping, of: bad_cable, severity: 0.4, "
     "duty: 0.3, period_s: .inf}", "period_s"),
    ("{target: us-east/r01/c01/nic0, kind: flapping, of: bad_cable, severity: 0.4, "
     "duty: true}", "duty"),
    ("{target: 7, kind: gpu_dead}", "target"),
])
def test_wrong_types_and_non_finite_values_are_refused(topo: Topology, fault: str,
                                                       field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_faults(f"faults:\n  - {fault}\n", topo, "f.yaml")
    assert f"faults[0].{field}" in str(err.value) and "f.yaml:2" in str(err.value)


def test_integer_severity_is_still_a_number(topo: Topology) -> None:
    ff = parse_faults("faults:\n  - {target: us-east/r01/c01/gpu0, kind: slow_gpu, "
                      "severity: 0}\n", topo)
    assert ff.faults[0].severity == 0.0


@pytest.mark.parametrize("payload,needle", [
    (b"faults:\n  - {target: us-east/r01/c01/gpu0, kind: gpu_dead}\x00\n", "NUL"),
    (b"faults: [\xff\xfe]\n", "UTF-8"),
    (b"a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
     b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
     b"e: [*d, *d, *d, *d, *d, *d, *d, *d]\n", "aliases"),
    (b"faults:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, 40)), "nested"),
])
def test_damaged_faults_files_are_errors(topo: Topology, tmp_path: Path, payload: bytes,
                                         needle: str) -> None:
    f = tmp_path / "faults.yaml"
    f.write_bytes(payload)
    with pytest.raises(SpecError, match=needle) as err:
        load_faults(str(f), topo)
    assert str(f) in str(err.value)
