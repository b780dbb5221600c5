"""A tray that cannot start (drained in Slurm, gpu_dead) leaves its rack with one tray and its
leaves with one GPU each: a shortfall there has no passing neighbour to be told from. On the
lab (no NVSwitch telemetry) such a tray shortfall once reached the per-switch-tray check and
became a probe error of the whole stage; a lone GPU's pair through the spine, short once,
became an unlocalized leaf. A shortfall that no retest reproduces is a stall of a shared host:
it is measured again and reported only when it shows twice (twin, with the stall or the fault
applied to the chosen tests only; the backend answers no per-plane probe, as the lab's)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from rackscale.certify import Ladder, LadderConfig, TwinBackend
from rackscale.certify.measure import Groups, Timed
from rackscale.certify.verdict import SHARED_CPU_THRESHOLDS
from rackscale.faults import Fault, TwinHardware, faults_from
from rackscale.fleet import Topology, load_fleet
from rackscale.lab import default_fleet_path

DEAD_TRAY = "lab/r01/c02"
LONE_TRAY = "lab/r01/c01"  # the other tray of rack r01: alone in its rack once c02 is dead

Hit = Callable[[list[str], bool, int], bool]  # (members, nvlink, call) -> slow this test?


class LabLikeTwin(TwinBackend):
    """The twin without per-plane figures (as the lab), where the tests `hit` selects run at
    `rel` of their speed; `hit` sees each group's GPU ids, NVLink on/off and how many times
    a group of the same members was tested before."""

    def __init__(self, hw: TwinHardware, hit: Hit, rel: float) -> None:
        super().__init__(hw)
        self.hit, self.rel = hit, rel
        self.seen: dict[tuple[tuple[str, ...], bool], int] = {}

    def why_not(self, probe: str) -> str | None:
        return "no NVSwitch telemetry here" if probe == "nvlink_plane" else None

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        raise RuntimeError("no NVSwitch telemetry here")

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        timed = super().allreduce(groups, nbytes, nvlink, t)
        secs = timed.seconds.copy()
        ids = self.hw.topo.gpu_ids
        for i in range(len(groups)):
            members = tuple(sorted(ids[int(g)] for g in groups.members(i)))
            call = self.seen.get((members, nvlink), 0)
            self.seen[(members, nvlink)] = call + 1
            if self.hit(list(members), nvlink, call):
                secs[i] /= self.rel
        return Timed(secs, timed.errors, timed.extra)


def _run(hit: Hit, rel: float = 0.3, extra: list[Fault] | None = None,
         ) -> list[tuple[str, str]]:
    topo = Topology.build(load_fleet(default_fleet_path()))
    dead = [Fault(target=f"{DEAD_TRAY}/gpu{k}", kind="gpu_dead") for k in (0, 1)]
    hw = TwinHardware(topo, faults_from(dead + (extra or []), topo), seed=3)
    cfg = LadderConfig(repeats=3, thresholds=dict(SHARED_CPU_THRESHOLDS))
    run = Ladder(topo, LabLikeTwin(hw, hit, rel), cfg).run()
    return sorted((f.component, f.kind) for f in run.findings)


DEAD = [(f"{DEAD_TRAY}/gpu0", "gpu_dead"), (f"{DEAD_TRAY}/gpu1", "gpu_dead")]


def _lone_tray(members: list[str]) -> bool:
    return all(m.startswith(LONE_TRAY + "/") for m in members)


def _lone_pair(members: list[str]) -> bool:
    return len(members) == 2 and any(m.startswith(LONE_TRAY + "/") for m in members) \
        and any(m.startswith("lab/r02/") for m in members)


@pytest.mark.parametrize("stage", ["tray", "domain"])
def test_a_stalled_test_of_the_tray_left_alone_in_its_rack_is_not_a_finding(stage: str,
                                                                           ) -> None:
    # the first NVLink test of the lone tray (stage 2 tray ring, or stage 3 "domain" ring
    # with the same members) runs at 30%; measured again it is healthy
    calls = {"tray": 0, "domain": 1}[stage]
    assert _run(lambda m, nv, call: nv and _lone_tray(m) and call == calls) == DEAD


def test_a_stalled_pair_of_a_lone_gpu_through_the_spine_is_not_a_finding() -> None:
    assert _run(lambda m, nv, call: not nv and _lone_pair(m) and call == 0) == DEAD


def test_a_persistent_shortfall_of_the_lone_tray_is_unlocalized_not_a_probe_error() -> None:
    # every NVLink test of that tray is short: no passing tray in its rack and no per-plane
    # figures to tell its ports from the rack's switch trays; the stage goes on for the rest
    found = _run(lambda m, nv, call: nv and _lone_tray(m))
    assert ("minilab", "probe_error") not in found and ("lab", "probe_error") not in found
    assert found == sorted([*DEAD, ("lab/r01", "unlocalized")])


def test_a_bad_cable_of_a_lone_gpu_is_still_reported() -> None:
    # a real fault shows in both samples of the pair: the leaf cannot be told from the cable
    # (no ring under the leaf passed), so it is the leaf, unlocalized
    found = _run(lambda m, nv, call: False, extra=[
        Fault(target=f"{LONE_TRAY}/nic0", kind="bad_cable", severity=0.3)])
    assert found == sorted([*DEAD, ("lab/leaf-rail0-0", "unlocalized")])
