"""A NIC that flaps down and up is chased until a retest lands in a down phase. On the lab a
pair test is much shorter than a flap's up phase, so the first pair retests of a leaf ring can
all land in up phases; the ring's own retest then caught a down phase again and the ladder
reported the leaf as unlocalized, or caught none and cleared it. Twin, with the down phases
laid by script on the NVLink-off tests that include one GPU (its NIC and cable): every other
test sees healthy hardware."""

from __future__ import annotations

import pytest

from rackscale.certify import Ladder, LadderConfig, TwinBackend
from rackscale.certify.measure import Groups, Timed
from rackscale.certify.stage_scaleout import FLAP_TRIES
from rackscale.certify.verdict import SHARED_CPU_THRESHOLDS
from rackscale.faults import TwinHardware
from rackscale.fleet import Topology, load_fleet
from rackscale.lab import default_fleet_path

REPEATS = 3


class ScriptedFlap(TwinBackend):
    """The twin, except that an NVLink-off test holding GPU `gpu` runs 50x slower (its NIC
    down: a stalled iteration) in the repeats whose number is in `down` (counted over the
    NVLink-off calls that hold `gpu`)."""

    def __init__(self, hw: TwinHardware, gpu: int, down: set[int], slower: float) -> None:
        super().__init__(hw)
        self.gpu, self.down, self.slower, self.calls = gpu, down, slower, 0

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        timed = super().allreduce(groups, nbytes, nvlink, t)
        mine = [i for i in range(len(groups)) if not nvlink and self.gpu in groups.members(i)]
        if not mine:
            return timed
        secs = timed.seconds.copy()
        if self.calls in self.down:
            secs[mine] *= self.slower
        self.calls += 1
        return Timed(secs, timed.errors, timed.extra)


def _run(gpu: int, down: set[int], slower: float) -> list[tuple[str, str, object]]:
    topo = Topology.build(load_fleet(default_fleet_path()))
    backend = ScriptedFlap(TwinHardware(topo, seed=5), gpu, down, slower)
    cfg = LadderConfig(repeats=REPEATS, stages=(4,), thresholds=dict(SHARED_CPU_THRESHOLDS))
    run = Ladder(topo, backend, cfg).run()
    return [(f.component, f.kind, f.evidence.get("of")) for f in run.findings]


def _retest(k: int) -> int:
    """The first repeat of the k-th chase (0-based) of the GPU's pair with the reference:
    after the leaf ring (repeats 0-2), the first pair tests (3-5) and the ring's retest
    (6-8), each chase is one pair test of REPEATS repeats."""
    return 3 * REPEATS + k * REPEATS


@pytest.mark.parametrize("ring_retest_down", [True, False],
                         ids=["ring-retest-in-down-phase", "ring-retest-in-up-phase"])
@pytest.mark.parametrize("gpu", [0, 5])
def test_a_flapping_dead_nic_whose_first_retests_land_in_up_phases_is_named(
        gpu: int, ring_retest_down: bool) -> None:
    topo = Topology.build(load_fleet(default_fleet_path()))
    nic = topo.ids[int(topo.gpu_nic[gpu])]
    # down in the ring's first repeat, up through the first pair tests, then (as the flap
    # goes on) down again in the last chase the ladder allows
    down = {0, _retest(FLAP_TRIES - 1)} | ({2 * REPEATS} if ring_retest_down else set())
    assert _run(gpu, down, 50.0) == [(nic, "flapping", "nic_dead")]


def test_a_ring_slowed_once_and_never_again_is_cleared() -> None:
    # one repeat at half speed (a shared host's stall, not a link down) and every retest
    # healthy: nothing to report, and no chase
    assert _run(2, {0}, 2.0) == []


def test_a_ring_down_once_and_never_again_stays_unlocalized_on_its_leaf() -> None:
    # one repeat with the link down (a stalled iteration) is no host stall; no retest named a
    # part, so the leaf stays the suspect rather than being cleared
    topo = Topology.build(load_fleet(default_fleet_path()))
    leaf = topo.leaves[int(topo.gpu_leaf[2])]
    assert _run(2, {0}, 50.0) == [(leaf, "unlocalized", None)]


@pytest.mark.parametrize("gpu", [0, 5])
def test_a_flapping_dead_nic_whose_leaf_ring_passed_is_named_through_its_spine_ring(
        gpu: int) -> None:
    """Every repeat of the GPU's leaf ring fell in an up phase (the ring passed); the spine
    ring of its rail went down in both samples. Before, that was `unlocalized` on the whole
    lab; the spine ring's members are now paired until a pair lands in a down phase."""
    topo = Topology.build(load_fleet(default_fleet_path()))
    nic = topo.ids[int(topo.gpu_nic[gpu])]
    # leaf ring (repeats 0-2) up; spine ring and its retest (3-5, 6-8) each down once; the
    # chases' pair tests (from 9 on) up until the last one the ladder allows
    down = {REPEATS, 2 * REPEATS, 3 * REPEATS + (FLAP_TRIES - 1) * REPEATS}
    assert _run(gpu, down, 50.0) == [(nic, "flapping", "nic_dead")]


def test_a_spine_ring_down_in_both_samples_with_no_pair_down_stays_unlocalized() -> None:
    # no pair retest ever lands in a down phase: nothing names a member, the ring's region
    # keeps the finding as before
    found = _run(5, {REPEATS, 2 * REPEATS}, 50.0)
    assert [(c, k) for c, k, _ in found] == [("lab", "unlocalized")]
