"""The certification ladder: stage 1 per GPU, 2 per tray/node, 3 per NVLink domain, 4
multi-rack (NVLink off, then on). A stage runs only on what passed the stage below it.

    run = Ladder(topo, TwinBackend(TwinHardware(topo, faults, seed=7))).run()
    run.findings, run.summary()

Every group test is judged against what the fleet's hardware model (`fleet.HardwareModel`:
link rates from the SKU specs by default) predicts for its members; a runner whose links run
at other stated rates passes its own model: `Ladder(topo, backend, hardware=model)`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rackscale.certify.campaign import Campaign
from rackscale.certify.findings import ComponentResult, Finding
from rackscale.certify.measure import Backend
from rackscale.certify.probes import PROBES, ProbeRegistry
from rackscale.certify.stage_gpu import run_stage_gpu
from rackscale.certify.stage_nvlink import run_stage_domain, run_stage_tray
from rackscale.certify.stage_scaleout import run_stage_multirack
from rackscale.certify.state import LadderConfig, LadderConfigError, RunState
from rackscale.fleet import COMPUTE_TRAY, NODE, RACK, REGION, HardwareModel, Topology
from rackscale.provenance import Provenance

if TYPE_CHECKING:
    from rackscale.store import TwinPlantV1

STAGE_FUNCS: dict[int, Callable[[RunState], None]] = {
    1: run_stage_gpu, 2: run_stage_tray, 3: run_stage_domain, 4: run_stage_multirack,
}
SCOPE_KINDS = (REGION, RACK, COMPUTE_TRAY, NODE)  # what `--scope` may name


@dataclass(slots=True, kw_only=True)
class CertifyRun:
    run_id: str
    backend: str
    fleet: str
    seed: int | None
    faults_file: str | None
    config: LadderConfig
    findings: list[Finding]
    results: list[ComponentResult]
    gpus_total: int
    gpus_healthy: int
    gpus_passed: int  # passed every stage they ran
    campaign: Campaign
    warns: int
    wall_s: float
    fabric: list[dict[str, Any]] = field(default_factory=list)
    # Parts never measured because an earlier failure left them out: {part, stage, because}
    untested: list[dict[str, Any]] = field(default_factory=list)
    # The twin's plant the run certified (None on real hardware): stored with the run, so the
    # lifecycle reads the same CDUs and power shelves (`twin.plant`).
    plant: TwinPlantV1 | None = None

    @property
    def allpairs_tests(self) -> int:
        n = self.gpus_total
        return n * (n - 1) // 2

    @property
    def failed_components(self) -> list[str]:
        return sorted({f.component for f in self.findings})

    def summary(self) -> dict[str, Any]:
        """The certify.run payload (docs/contracts.md)."""
        c = self.campaign
        return {
            "run_id": self.run_id, "backend": self.backend, "seed": self.seed,
            "faults_file": self.faults_file, "stages": list(self.config.stages),
            "collective_tests": c.collective_tests, "collective_runs": c.collective_runs,
            "allpairs_tests": self.allpairs_tests,
            "tests_vs_allpairs": round(self.allpairs_tests / max(c.collective_tests, 1), 1),
            "campaign_s": round(c.now, 1), "campaign_batches": c.batches,
            "repeats": self.config.repeats, "gpus_total": self.gpus_total,
            # gpus_clear: outside every finding's blast radius (not the report's "healthy",
            # which applies per-kind rules to powered GPUs); gpus_healthy is its old name
            "gpus_clear": self.gpus_healthy, "gpus_healthy": self.gpus_healthy,
            "gpus_passed": self.gpus_passed,
            "findings": len(self.findings), "warns": self.warns, "wall_s": round(self.wall_s, 3),
            "fabric": self.fabric, "scope": self.config.scope, "untested": self.untested,
            Provenance(self.backend).basis: True,
        }


class Ladder:
    def __init__(self, topo: Topology, backend: Backend, config: LadderConfig | None = None,
                 *, registry: ProbeRegistry = PROBES, seed: int | None = None,
                 faults_file: str | None = None, hardware: HardwareModel | None = None) -> None:
        self.topo = topo
        # What healthy hardware can do, link by link: from the SKU specs unless the runner
        # states its own link rates (a lab's shaped links).
        self.hardware = hardware if hardware is not None else HardwareModel(topo)
        self.backend = backend
        self.config = config or LadderConfig()
        self.registry = registry
        self.seed = seed
        self.faults_file = faults_file

    def run(self, progress: Callable[[int, str], None] | None = None) -> CertifyRun:
        t0 = time.perf_counter()
        cfg = self.config
        st = RunState(topo=self.topo, backend=self.backend, config=cfg,
                      campaign=Campaign(repeats=cfg.repeats, soak_s=cfg.soak_s),
                      model=self.hardware,
                      registry=self.registry, progress=progress)
        in_scope = self._scope_mask()
        st.ok &= in_scope  # day-2: only the repaired rack or tray is certified
        for stage in cfg.stages:
            STAGE_FUNCS[stage](st)
        findings = sorted(st.findings, key=lambda f: (f.stage, f.component, f.kind))
        return CertifyRun(
            run_id=uuid.uuid4().hex[:12], backend=self.backend.name, fleet=self.topo.spec.name,
            seed=self.seed, faults_file=self.faults_file, config=cfg, findings=findings,
            results=self._results(st, findings), gpus_total=int(in_scope.sum()),
            gpus_healthy=int((self._healthy_mask(findings) & in_scope).sum()),
            gpus_passed=self._passed(st),
            campaign=st.campaign, warns=st.warns, wall_s=time.perf_counter() - t0,
            fabric=st.fabric, untested=self._untested(st, findings, in_scope),
        )

    def _untested(self, st: RunState, findings: list[Finding],
                  in_scope: np.ndarray) -> list[dict[str, Any]]:
        """NICs whose GPU an earlier failure left out of the multi-rack stage. A NIC is
        measured only there, and only with its own GPU: left out, it was never tested (on
        an HGX node a bad GPU's NIC; on NVL72 a failed tray's), so it is not certified and
        must say so, not pass by silence."""
        if 4 not in self.config.stages:
            return []
        topo = self.topo
        left_out = np.flatnonzero(in_scope & ~st.ran[4])
        if not len(left_out):
            return []
        named = {f.component for f in findings}
        because: dict[int, list[str]] = {}
        everywhere = []  # a probe that failed fleet-wide leaves every GPU out
        for f in findings:
            if f.component in topo.index and f.component != topo.spec.name:
                for g in topo.affected_gpus(f.component):
                    because.setdefault(int(g), []).append(f.component)
            else:
                everywhere.append(f.component)
        out = []
        for g in left_out:
            if topo.gpu_nic[g] < 0:
                continue
            nic = topo.ids[int(topo.gpu_nic[g])]
            if nic not in named:
                out.append({"part": nic, "stage": 4,
                            "because": sorted({*because.get(int(g), []), *everywhere})})
        return out

    def _passed(self, st: RunState) -> int:
        ok = np.ones(len(self.topo.gpu_ids), bool)
        for s in self.config.stages:
            ok &= st.passed[s]
        return int(ok.sum())

    def _scope_mask(self) -> np.ndarray:
        """The GPUs this run certifies: all, or those of `config.scope` (a region, rack or
        tray/node id)."""
        topo, scope = self.topo, self.config.scope
        mask = np.zeros(len(topo.gpu_ids), bool)
        if scope is None:
            mask[:] = True
            return mask
        kind = topo.kinds[topo.idx(scope)]
        if kind not in SCOPE_KINDS:
            raise LadderConfigError(f"--scope {scope} is a {kind}; certify a region, rack or "
                                    f"tray: one of {', '.join(SCOPE_KINDS)}")
        mask[topo.affected_gpus(scope)] = True
        return mask

    def _healthy_mask(self, findings: list[Finding]) -> np.ndarray:
        """GPUs outside every finding's blast radius."""
        bad = np.zeros(len(self.topo.gpu_ids), bool)
        for f in findings:
            if f.component in self.topo.index and f.component != self.topo.spec.name:
                bad[self.topo.affected_gpus(f.component)] = True
            else:
                bad[:] = True  # a probe that failed fleet-wide certifies nothing
        return ~bad

    def _results(self, st: RunState, findings: list[Finding]) -> list[ComponentResult]:
        """Per tray/node and per rack: verdict and the stages all its GPUs passed."""
        topo = self.topo
        stages = self.config.stages
        in_tray: dict[int, list[str]] = {}
        in_rack: dict[str, list[str]] = {}
        external: dict[int, list[str]] = {}  # findings outside the tray touching its GPUs
        for f in findings:
            if f.component not in topo.index:
                continue
            holder = topo.holder(f.component)
            if holder.tray is not None:
                in_tray.setdefault(topo.index[holder.tray], []).append(f.component)
            elif holder.rack is not None:
                in_rack.setdefault(holder.rack, []).append(f.component)
            else:
                for g in topo.affected_gpus(f.component):
                    external.setdefault(int(topo.gpu_tray[g]), []).append(f.component)
        # GPUs are numbered tray by tray, so each tray is one run of GPU numbers.
        t_starts = np.flatnonzero(np.diff(topo.gpu_tray, prepend=-1) != 0)
        tray_of = topo.gpu_tray[t_starts]
        ran_t = np.zeros(len(t_starts), bool)
        passed_t = {}
        for s in stages:
            ran_t |= np.maximum.reduceat(st.ran[s], t_starts)
            passed_t[s] = np.minimum.reduceat(st.passed[s], t_starts)
        tray_rack = topo.gpu_rack[t_starts]
        out: list[ComponentResult] = []
        for rack in topo.racks:
            trays = np.arange(np.searchsorted(tray_rack, rack.index),
                              np.searchsorted(tray_rack, rack.index, side="right"))
            rack_bad = in_rack.get(rack.id, [])
            trays_failed = 0
            for t in trays:
                tray = int(tray_of[t])
                why = in_tray.get(tray, []) + rack_bad
                verdict = "not_run" if not ran_t[t] else ("fail" if why else "pass")
                trays_failed += verdict == "fail"
                extra: dict[str, Any] = {}
                if why:
                    extra["findings"] = sorted(set(why))
                if tray in external:
                    extra["blocked_by"] = sorted(set(external[tray]))
                out.append(ComponentResult(component=topo.ids[tray], verdict=verdict,
                                           stages_passed=[s for s in stages if passed_t[s][t]],
                                           extra=extra))
            sel = slice(rack.gpu_first, rack.gpu_end)
            ran = any(st.ran[s][sel].any() for s in stages)
            passed = [s for s in stages if st.passed[s][sel].any()
                      and not (st.ran[s][sel] & ~st.passed[s][sel]).any()]
            verdict = "not_run" if not ran else ("fail" if rack_bad else "pass")
            out.append(ComponentResult(
                component=rack.id, verdict=verdict, stages_passed=passed,
                extra={"trays_failed": trays_failed, "trays": len(trays)}
                | ({"findings": sorted(set(rack_bad))} if rack_bad else {})))
        return out
