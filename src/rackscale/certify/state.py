"""The state one ladder run carries between stages, and its helpers (probe sampling with
error capture, judging group tests, building findings)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rackscale.certify import expect
from rackscale.certify.campaign import Campaign, ProbeFailed, Sampled
from rackscale.certify.findings import Finding
from rackscale.certify.localize import Outcome, Suspect, Tester, not_reproduced
from rackscale.certify.measure import Backend, Groups, Scope
from rackscale.certify.probes import PROBES, ProbeRegistry
from rackscale.certify.verdict import THRESHOLDS, Judgement, Thresholds, judge, repeat_median
from rackscale.errors import UserError
from rackscale.fleet import Fabric, HardwareModel, Topology

DOWN_REL = 0.05  # a part at or below 5% of its reference is down/dead, not degraded
STAGES = (1, 2, 3, 4)
# The collective probes and the fabric each one exercises (NVLink on / off).
PROBE_FABRIC: dict[str, Fabric] = {"nvlink_allreduce": "nvlink",
                                   "scaleout_allreduce": "scaleout"}


class LadderConfigError(UserError):
    pass


@dataclass(kw_only=True, slots=True)
class LadderConfig:
    """How a certification campaign runs. Validated at construction."""

    stages: tuple[int, ...] = STAGES
    repeats: int = 8  # samples per test, spread over one soak window (catches flapping)
    soak_s: float = 600.0
    message_bytes: int = 1 << 30  # all-reduce message size (nccl-tests style, 1 GiB)
    domain_fraction: float = 0.5  # this share of a domain's trays failing blames its switches
    # Verdict margins per probe: the twin's by default; noisier real hardware passes its own
    # (verdict.SHARED_CPU_THRESHOLDS for CPU ranks on a shared host).
    thresholds: dict[str, Thresholds] = field(default_factory=lambda: dict(THRESHOLDS))
    # Certify only this region, rack or tray (day 2, after a repair); None = the whole fleet.
    scope: str | None = None

    def __post_init__(self) -> None:
        self.stages = tuple(sorted(set(self.stages)))
        bad = [s for s in self.stages if s not in STAGES]
        if bad or not self.stages:
            raise LadderConfigError(f"stages {list(bad) or '(none)'} are not ladder stages; "
                                    "valid stages: 1 (gpu), 2 (tray), 3 (domain), 4 (multi-rack)")
        if not 1 <= self.repeats <= 64:
            raise LadderConfigError(f"repeats={self.repeats}: use 1..64 (8 catches flapping "
                                    "faults with duty 1/8..7/8)")
        if self.soak_s <= 0 or self.message_bytes < 1024:
            raise LadderConfigError("soak_s must be > 0 and message_bytes >= 1024")
        if not 0 < self.domain_fraction <= 1:
            raise LadderConfigError("domain_fraction must lie in (0, 1]")
        missing = sorted(set(THRESHOLDS) - set(self.thresholds))
        if missing:
            raise LadderConfigError(f"thresholds lack probes {', '.join(missing)}; give one "
                                    f"per probe: {', '.join(THRESHOLDS)}")


def split_by(values: np.ndarray, keys: np.ndarray, min_size: int = 2,
             ) -> tuple[np.ndarray, list[np.ndarray]]:
    """Group `values` by `keys` (any order): (unique keys kept, groups of >= min_size)."""
    order = np.argsort(keys, kind="stable")
    v, k = values[order], keys[order]
    uniq, starts = np.unique(k, return_index=True)
    parts = np.split(v, starts[1:])
    keep = [i for i, p in enumerate(parts) if len(p) >= min_size]
    return uniq[keep], [parts[i] for i in keep]


def holding_scope(topo: Topology, gpus: np.ndarray) -> str:
    """The smallest scope holding every GPU of a group: the component a shortfall that no
    single part explains is blamed on (its rack, its region, else the fleet)."""
    racks = np.unique(topo.gpu_rack[gpus])
    if len(racks) == 1:
        return topo.racks[int(racks[0])].id
    regions = np.unique(topo.gpu_region[gpus])
    return topo.regions[int(regions[0])] if len(regions) == 1 else topo.spec.name


@dataclass(slots=True)
class RunState:
    topo: Topology
    backend: Backend
    config: LadderConfig
    campaign: Campaign
    # The fleet's hardware model: SKUs and link rates every expectation is computed from.
    model: HardwareModel
    registry: ProbeRegistry = PROBES
    findings: list[Finding] = field(default_factory=list)
    progress: Callable[[int, str], None] | None = None
    ok: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    ran: dict[int, np.ndarray] = field(default_factory=dict)
    passed: dict[int, np.ndarray] = field(default_factory=dict)
    warns: int = 0
    fabric: list[dict[str, object]] = field(default_factory=list)
    # Link efficiencies learned per fabric by the top-level group tests (certify.expect).
    learned: dict[Fabric, expect.LearnedLinks] = field(default_factory=dict)
    sku_idx: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))

    def __post_init__(self) -> None:
        n = len(self.topo.gpu_ids)
        self.ok = np.ones(n, bool)
        for s in STAGES:
            self.ran[s] = np.zeros(n, bool)
            self.passed[s] = np.zeros(n, bool)
        self.sku_idx = self.model.gpu_sku

    # ------------------------------------------------------------------ helpers
    def note(self, stage: int, msg: str) -> None:
        if self.progress is not None:
            self.progress(stage, msg)

    def spec(self, gpus: np.ndarray, attr: str) -> np.ndarray:
        return self.model.gpu_spec(attr, gpus)

    def scope_of(self, gpus: np.ndarray) -> str:
        return holding_scope(self.topo, gpus)

    def sample(self, probe: str, scope: Scope, n: int) -> Sampled:
        return self.campaign.sample(self.registry.create(probe, self.backend), scope, n)

    def probe_error(self, stage: int, err: ProbeFailed, scope_id: str) -> None:
        self.findings.append(Finding(
            component=scope_id, kind="probe_error", stage=stage, confidence=1.0,
            evidence={"probe": err.probe, "error": str(err.error),
                      "error_type": type(err.error).__name__}))

    def finding(self, component: str, kind: str, stage: int, *, flapping: bool,
                confidence: float, evidence: dict[str, object], rel: float,
                hard_fails: int) -> None:
        ev = dict(evidence)
        if kind not in ("sdc", "gpu_dead"):
            ev["estimated_severity"] = round(max(rel, 0.0), 3)
        if flapping:
            ev["of"] = kind
            ev["present_in_repeats"] = round(hard_fails / self.config.repeats, 3)
            kind = "flapping"
        self.findings.append(Finding(component=component, kind=kind, stage=stage,
                                     evidence=ev, confidence=confidence))

    def finding_from(self, component: str, kind: str, stage: int, j: Judgement, i: int,
                     unit: str, source: str, extra: dict[str, object] | None = None) -> None:
        self.finding(component, kind, stage, flapping=bool(j.flapping[i]),
                     confidence=j.confidence(i), evidence=j.evidence(i, unit, source)
                     | (extra or {}), rel=j.fail_rel(i), hard_fails=int(j.hard_fails[i]))

    def finding_outcome(self, component: str, kind: str, stage: int, o: Outcome,
                        extra: dict[str, object] | None = None) -> None:
        self.finding(component, kind, stage, flapping=o.flapping, confidence=o.confidence,
                     evidence=o.evidence | (extra or {}), rel=o.fail_rel,
                     hard_fails=o.hard_fails)

    # ------------------------------------------------------------------ group tests
    def expected(self, groups: list[np.ndarray], *, nvlink: bool) -> np.ndarray:
        """Bus bandwidth each group should reach: the hardware model on the learned rates."""
        g = Groups.of(groups)
        return expect.expected(self.model, self.learned, g.flat, g.offsets, nvlink=nvlink,
                               spec_eff=expect.SPEC_EFFICIENCY).reference

    def judge_groups(self, probe: str, groups: list[np.ndarray], *, learn: bool,
                     ) -> tuple[Judgement, Sampled]:
        """Test each group once (with repeats) and judge it against what its own members and
        links can do (certify.expect). `learn` first learns the fabric's link efficiencies
        from these results (top-level tests); otherwise the stored ones stand."""
        fabric = PROBE_FABRIC[probe]
        g = Groups.of(groups)
        s = self.sample(probe, Scope(groups=g, size_bytes=self.config.message_bytes),
                        len(groups))
        if learn:
            med = repeat_median(s.samples, s.error_mask)
            self.learned[fabric] = expect.learn(
                self.model, fabric, g.flat, g.offsets, med, spec_eff=expect.SPEC_EFFICIENCY[fabric])
        bl = expect.expected(self.model, self.learned, g.flat, g.offsets,
                             nvlink=fabric == "nvlink", spec_eff=expect.SPEC_EFFICIENCY)
        return judge(s.samples, s.error_mask, s.errors, bl, self.config.thresholds[probe]), s

    def cleared(self, probe: str, suspects: list[Suspect]) -> tuple[list[Suspect],
                                                                    list[Suspect]]:
        """`suspects` split into (still suspect, cleared): cleared are those whose shortfall
        neither the bisection's retests nor one more test of the whole group reproduced: a
        stall of a shared host, not a part (a fault that persists shows again; one that
        flaps gets a second chance to)."""
        quiet = [sp for sp in suspects if not_reproduced(sp)]
        if not quiet:
            return suspects, []
        again, _ = self.judge_groups(probe, [sp.members for sp in quiet], learn=False)
        gone = {id(sp) for k, sp in enumerate(quiet) if not again.failed[k]}
        return ([sp for sp in suspects if id(sp) not in gone],
                [sp for sp in suspects if id(sp) in gone])

    def tester(self, probe: str) -> Tester:
        def test(groups: list[np.ndarray]) -> list[Outcome]:
            j, s = self.judge_groups(probe, groups, learn=False)
            return [self.outcome(j, i, s) for i in range(len(groups))]
        return test

    @staticmethod
    def outcome(j: Judgement, i: int, s: Sampled) -> Outcome:
        return Outcome(fail=bool(j.failed[i]), rel=float(np.nan_to_num(j.rel[i])),
                       fail_rel=j.fail_rel(i), flapping=bool(j.flapping[i]),
                       hard_fails=int(j.hard_fails[i]), confidence=j.confidence(i),
                       evidence=j.evidence(i, s.unit, s.source))
