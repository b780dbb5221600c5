"""The "too many bad trays cordons the rack" rule is rack-template data: a template that
tolerates no bad tray cordons its rack for one, where the NVL72 default (2) only degrades it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lc_rig import Rig

from rackscale.fleet import TEMPLATES, FleetSpec, RackGroup, RegionSpec
from rackscale.lifecycle import apply_findings, set_goal, state_of


@pytest.mark.parametrize(("tolerated", "escalated"), [(0, True), (2, False)])
def test_the_cordon_threshold_comes_from_the_template(tmp_path: Path, tolerated: int,
                                                      escalated: bool) -> None:
    strict = dataclasses.replace(TEMPLATES["vr-nvl72"], name="strict-nvl72",
                                 max_bad_trays=tolerated)
    with TEMPLATES.scoped():
        TEMPLATES.add(strict.name, strict)
        spec = FleetSpec(name="strict", regions=[
            RegionSpec(name="a", racks=[RackGroup(template="strict-nvl72", count=1)])])
        rig = Rig(f"sqlite:///{tmp_path / 'lc.db'}", spec)
        try:
            (rack,) = rig.ctl.targets
            set_goal(rig.store, [rack], "burn_in")
            rig.ctl.run(until_idle=True, max_passes=200)
            assert state_of(rig.store, rack).state == "burn_in"
            rig.store.append_event(f"{rack}/c03/gpu1", "certify.finding", {
                "component": f"{rack}/c03/gpu1", "kind": "gpu_dead", "stage": "gpu",
                "evidence": {}, "confidence": 0.9, "run_id": "run-1", "backend": "twin",
                "verdict": "fail"})
            rep = apply_findings(rig.store, rig.topo)
            assert rep.trays_triaged == [f"{rack}/c03"]
            assert (rep.racks_escalated == [rack]) is escalated
            assert (state_of(rig.store, rack).state == "maintenance") is escalated
        finally:
            rig.store.close()
    assert "strict-nvl72" not in TEMPLATES


@given(groups=st.lists(st.tuples(st.sampled_from(sorted(TEMPLATES)), st.integers(1, 3),
                                 st.integers(1, 16)), min_size=1, max_size=5))
@settings(max_examples=40, deadline=None)
def test_power_targets_are_each_racks_own_shelves_and_trays(groups) -> None:
    """On any mix of templates and node counts, a rack's power targets are exactly its power
    shelves (in sequence order) and its trays or nodes, as a walk over its parts finds them."""
    from rackscale.fleet import COMPUTE_TRAY, NODE, POWER_SHELF, Topology
    from rackscale.lifecycle import power_targets

    racks = [RackGroup(template=t, count=c,
                       nodes_per_rack=n if TEMPLATES[t].nodes_per_rack_varies else None)
             for t, c, n in groups]
    topo = Topology.build(FleetSpec(name="pt", regions=[RegionSpec(name="r", racks=racks)]))
    got = power_targets(topo)
    assert list(got) == [r.id for r in topo.racks]
    for rack in topo.racks:
        parts = range(rack.first, rack.end)
        shelves = sorted((topo.ids[j] for j in parts if topo.kinds[j] == POWER_SHELF),
                         key=lambda s: int(s.rsplit("/ps", 1)[1]))
        trays = [topo.ids[j] for j in parts if topo.kinds[j] in (COMPUTE_TRAY, NODE)]
        assert got[rack.id] == (shelves, trays)
