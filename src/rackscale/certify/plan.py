"""The campaign the ladder would run, as data: its batches of tests, stage by stage.

The plan is not a second copy of the ladder's rules. The ladder itself runs, on a healthy
digital twin, behind `RecordingBackend`, which answers every probe from the twin and writes
down what was asked: which probe, on which GPUs or groups, NVLink on or off, in what order.
One call of the backend is one batch (the plan runs one repeat per test; a real campaign
repeats each batch over its soak window). A healthy fleet passes every test, so the plan is
the campaign of a fleet without faults: the batches that bisect a failing group are decided
by the results of the tests before them and exist only at run time.

    plan = plan_campaign(topo, LadderConfig(stages=(1, 2)))
    for batch in plan.batches: batch.stage, batch.probe, batch.groups
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rackscale.certify.backends import TwinBackend
from rackscale.certify.ladder import Ladder
from rackscale.certify.measure import Groups, Timed
from rackscale.certify.state import LadderConfig
from rackscale.faults import TwinHardware
from rackscale.fleet import Topology

# Per-rank probes run alone on each GPU; collectives run across the GPUs of one group.
PER_RANK = ("gemm", "hbm", "thermal")


@dataclass(frozen=True, slots=True)
class PlannedBatch:
    """One batch: tests that run at once on disjoint parts. `groups` are component ids: the
    members of each collective, or one GPU per group for a per-rank probe."""

    order: int  # position in the campaign, from 0; a batch starts when the one before ended
    stage: int
    probe: str  # gemm | hbm | thermal | nvlink_allreduce | scaleout_allreduce | nvlink_plane
    groups: tuple[tuple[str, ...], ...]
    nvlink: bool | None = None  # collectives only: NVLink on (True) or off (False)
    message_bytes: int | None = None  # collectives only

    @property
    def collective(self) -> bool:
        return self.probe not in PER_RANK


@dataclass(slots=True)
class CampaignPlan:
    fleet: str
    config: LadderConfig
    batches: list[PlannedBatch] = field(default_factory=list)
    findings: int = 0  # findings of the healthy twin: 0 unless the fleet cannot pass its model


class RecordingBackend:
    """A backend that answers from the twin and records every question as a batch."""

    def __init__(self, topo: Topology, inner: TwinBackend) -> None:
        self.topo = topo
        self.inner = inner
        self.name = inner.name
        self.gemm_n = inner.gemm_n
        self.copy_bytes = inner.copy_bytes
        self.stage = 0
        self.batches: list[PlannedBatch] = []

    def why_not(self, probe: str) -> str | None:
        return self.inner.why_not(probe)

    def _ids(self, gpus: np.ndarray) -> tuple[str, ...]:
        return tuple(self.topo.gpu_ids[int(g)] for g in gpus)

    def _record(self, probe: str, groups: tuple[tuple[str, ...], ...], **kw: Any) -> None:
        self.batches.append(PlannedBatch(order=len(self.batches), stage=self.stage,
                                         probe=probe, groups=groups, **kw))

    def gemm(self, gpus: np.ndarray, n: int, t: float) -> Timed:
        self._record("gemm", tuple((g,) for g in self._ids(gpus)))
        return self.inner.gemm(gpus, n, t)

    def copy(self, gpus: np.ndarray, nbytes: int, t: float) -> Timed:
        self._record("hbm", tuple((g,) for g in self._ids(gpus)))
        return self.inner.copy(gpus, nbytes, t)

    def allreduce(self, groups: Groups, nbytes: int, nvlink: bool, t: float) -> Timed:
        probe = "nvlink_allreduce" if nvlink else "scaleout_allreduce"
        members = tuple(self._ids(groups.members(i)) for i in range(len(groups)))
        self._record(probe, members, nvlink=nvlink, message_bytes=nbytes)
        return self.inner.allreduce(groups, nbytes, nvlink, t)

    def nvlink_plane(self, domains: np.ndarray, t: float) -> Timed:
        topo = self.topo
        members = tuple(self._ids(np.flatnonzero(topo.gpu_domain == int(d))) for d in domains)
        self._record("nvlink_plane", members)
        return self.inner.nvlink_plane(domains, t)

    def telemetry(self, racks: np.ndarray, t: float) -> Timed:
        # read on every GPU's node: one per-rank reading per GPU of the racks
        gpus = np.concatenate([np.arange(self.topo.racks[int(r)].gpu_first,
                                         self.topo.racks[int(r)].gpu_end) for r in racks])
        self._record("thermal", tuple((g,) for g in self._ids(gpus)))
        return self.inner.telemetry(racks, t)


def plan_campaign(topo: Topology, config: LadderConfig | None = None, *,
                  seed: int = 7) -> CampaignPlan:
    """The ladder's campaign on `topo` with `config` (stages, scope, message size), recorded
    on a healthy twin; one repeat per test (repeats are the runner's, inside each test)."""
    config = replace(config or LadderConfig(), repeats=1)
    rec = RecordingBackend(topo, TwinBackend(TwinHardware(topo, None, seed=seed)))

    def progress(stage: int, _msg: str) -> None:
        rec.stage = stage

    run = Ladder(topo, rec, config, seed=seed).run(progress)
    return CampaignPlan(fleet=topo.spec.name, config=config, batches=rec.batches,
                        findings=len(run.findings))
