"""The one thermal curve (coolant flow -> GPU clock) that the twin and the lab share."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rackscale.faults import (
    MIN_CLOCK,
    THROTTLE_FLOW,
    Fault,
    TwinHardware,
    clock_fraction,
    faults_from,
)
from rackscale.fleet import Topology, load_fleet
from rackscale.lab import default_fleet_path

flows = st.floats(0.0, 2.0, allow_nan=False)


def test_full_clock_at_nominal_flow_and_above_the_throttle_point() -> None:
    assert clock_fraction(1.0) == 1.0
    assert clock_fraction(THROTTLE_FLOW) == 1.0
    assert clock_fraction(0.0) == MIN_CLOCK
    assert clock_fraction(0.5) == 0.5 / THROTTLE_FLOW


@given(a=flows, b=flows)
def test_less_flow_never_gives_a_faster_clock(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    assert MIN_CLOCK <= clock_fraction(lo) <= clock_fraction(hi) <= 1.0


def test_an_array_gives_the_scalar_curve_element_by_element() -> None:
    x = np.linspace(0, 1.2, 25)
    assert np.array_equal(clock_fraction(x), [clock_fraction(float(v)) for v in x])


def test_the_twin_throttles_a_cooled_rack_by_the_same_curve() -> None:
    topo = Topology.build(load_fleet(default_fleet_path()))
    ff = faults_from([Fault(target="lab/r01/cdu", kind="coolant_flow_low", severity=0.4)],
                     topo)
    th = TwinHardware(topo, ff, noise=0.0).thermal(np.arange(len(topo.racks)), 0.0)
    per_rack = dict(zip(topo.gpu_rack[th.gpus].tolist(), th.gpu_clock_frac.tolist(),
                        strict=True))
    assert per_rack == {0: clock_fraction(0.4), 1: 1.0}


@given(severity=st.floats(0.05, 0.99), seed=st.integers(0, 50))
def test_certify_and_the_lifecycle_read_one_flow_figure_per_cdu(severity: float,
                                                                 seed: int) -> None:
    """The thermal probe's telemetry and the lifecycle's CDU driver give the same L/min for
    each CDU: a healthy one its margin over the need, a faulted one `severity` of the need."""
    from rackscale.faults import TwinCoolingDriver
    from rackscale.fleet import NOMINAL_FLOW_MARGIN

    topo = Topology.build(load_fleet(default_fleet_path()))
    ff = faults_from([Fault(target="lab/r01/cdu", kind="coolant_flow_low",
                            severity=severity)], topo)
    racks = np.arange(len(topo.racks))
    probe = TwinHardware(topo, ff, seed=seed, noise=0.0).thermal(racks, 0.0).flow_lpm
    cdu = TwinCoolingDriver(topo, ff, seed=seed, noise=0.0, clock=lambda: 0.0).read()
    need = [r.required_flow_lpm for r in topo.racks]
    assert [cdu[r.id].flow_lpm for r in topo.racks] == probe.tolist()
    assert probe.tolist() == [need[0] * severity, need[1] * NOMINAL_FLOW_MARGIN]
