"""What a job's supervisor reads of a rack's cooling: the lifecycle's coolant-fault response
(`coolant_conditions`), on the simulated plant and clock. A rack is hot while its response is
under way, must be left once the response reaches its drain tier, and is neither once the
flow is back."""

from __future__ import annotations

from pathlib import Path

import pytest
from lc_rig import Rig, small_spec

from rackscale.lifecycle import (
    FaultPolicy,
    coolant_conditions,
    enrolled_racks,
    set_goal,
    state_of,
)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(f"sqlite:///{tmp_path / 'lc.db'}", small_spec(budget_kw=None))


def test_the_response_tiers_become_the_racks_conditions(rig: Rig) -> None:
    pol = FaultPolicy()
    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    rig.ctl.run(until_idle=True, max_passes=200)
    rig.store.append_event("b/r01", "certify.result", {"verdict": "pass", "run_id": "x"})
    set_goal(rig.store, ["b/r01"], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    assert state_of(rig.store, "b/r01").state == "production"
    assert coolant_conditions(rig.store) == {}

    rig.plant.set_flow("b/r01", 100.0)  # needs 272 L/min
    t0 = rig.clock()
    rig.ctl.reconcile()
    (c,) = coolant_conditions(rig.store).values()
    assert c["tier"] == "warn" and c["drain"] is False and c["since"] == t0
    rig.clock.advance(pol.drain_s)
    rig.ctl.reconcile()
    got = coolant_conditions(rig.store)
    assert set(got) == {"b/r01"} and got["b/r01"]["drain"] is True
    assert got["b/r01"]["state"] == "draining" and got["b/r01"]["since"] == t0
    assert coolant_conditions(rig.store, {"a/r01"}) == {}  # only the racks asked for

    rig.plant.set_flow("b/r01", None)  # the flow is back: nothing to leave or fear
    rig.ctl.reconcile()
    assert coolant_conditions(rig.store) == {}


def test_enrolled_racks_are_those_the_lifecycle_knows(rig: Rig) -> None:
    assert enrolled_racks(rig.store, {"a/r01", "b/r01", "x/r09"}) == {"a/r01", "b/r01"}
