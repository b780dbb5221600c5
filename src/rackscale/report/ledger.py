"""The usable-capacity ledger: from the headline GPU count down to expected goodput.

Each step keeps a subset of the GPUs of the step above (so the ledger is monotone by
construction), names the reason code of every GPU it drops, and says what its figure is based
on: the fleet spec, the inventory, events measured on real hardware, events simulated on the
digital twin, or nothing ("not_run": the count is carried through and flagged).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rackscale.certify import STAGE_NAMES, parse_stages
from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.provenance import Provenance
from rackscale.report.rackrows import RackInputs, rack_rows
from rackscale.report.reasons import Reason
from rackscale.report.rules import effective_action, rule_for
from rackscale.report.simulation import failure_goodput, simulation_of
from rackscale.report.states import TRAY_OUT_OF_SERVICE, rack_powered, tray_powered
from rackscale.report.storeview import StoreView
from rackscale.store import (
    CertifyFindingV1,
    CertifyResultV1,
    CertifyRunV1,
    Event,
    InvalidPayload,
    LifecycleTransitionV1,
)

Basis = Literal["spec", "inventory", "measured", "simulated", "recorded", "not_run"]

def stage_name(stage: Any) -> str:
    if isinstance(stage, int) and stage in STAGE_NAMES:
        return str(STAGE_NAMES[stage])
    return str(stage)


class JobShapeError(UserError):
    pass


# The default job shape's name before it is resolved on a fleet (see JobShape.resolved).
WHOLE_DOMAINS = "whole-domains"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobShape:
    """The job the "certified" step certifies for: whole NVLink domains of `gpus_per_domain`
    GPUs, each domain having passed the certification stages in `required_stages`.
    `gpus_per_domain` None (the default): each rack by its own template's whole domain (an
    NVL72 rack's 72 GPUs, an HGX node's 8), so a mixed fleet counts every pool by its shape."""

    name: str = WHOLE_DOMAINS
    gpus_per_domain: int | None = None
    required_stages: tuple[str, ...] = ("domain",)

    def resolved(self, topo: Topology) -> JobShape:
        """The default shape named by the fleet's pools (`whole-nvl72-domains`, or
        `whole-hgx-nodes + whole-nvl72-domains` on a mixed fleet); any other as it is."""
        if self.name != WHOLE_DOMAINS or self.gpus_per_domain is not None:
            return self
        names = sorted({r.template.whole_domain_shape for r in topo.racks})
        return JobShape(name=" + ".join(names) or WHOLE_DOMAINS, gpus_per_domain=None,
                        required_stages=self.required_stages)

    def domain_gpus(self, own: int) -> int:
        """GPUs one job of this shape takes in a domain of `own` GPUs."""
        return own if self.gpus_per_domain is None else self.gpus_per_domain

    def __post_init__(self) -> None:
        if self.gpus_per_domain is not None and self.gpus_per_domain <= 0:
            raise JobShapeError(f"job shape {self.name}: gpus_per_domain must be > 0, got "
                                f"{self.gpus_per_domain}; use 72 for whole NVL72 domains")
        # Stored results carry stage names; a name that is no stage would match nothing and
        # certify 0 GPUs without a word, so it is refused (numbers are accepted too).
        if self.required_stages:
            names = tuple(STAGE_NAMES[n] for n in parse_stages(self.required_stages, "--stage"))
            object.__setattr__(self, "required_stages", names)


@dataclass(slots=True, kw_only=True)
class Step:
    key: str
    label: str
    count: float
    reason: str  # what the count rests on (a reason code)
    basis: Basis
    source: str  # where its inputs came from
    lost: dict[str, float] = field(default_factory=dict)  # reason code -> GPUs dropped here
    provenance: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    ci95: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "count": self.count,
                "reason": self.reason, "basis": self.basis, "source": self.source,
                "lost": self.lost, "provenance": self.provenance, "note": self.note,
                "ci95": self.ci95}


@dataclass(slots=True, kw_only=True)
class Ledger:
    steps: list[Step]
    shape: JobShape
    # per GPU number: the key of the last step it survived, and why it dropped
    gpu_reason: list[str]
    racks: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    warnings: list[str]

    def step(self, key: str) -> Step:
        return next(s for s in self.steps if s.key == key)


def _basis_of(backend: Any) -> Basis:
    provenance = Provenance.parse(backend)
    return provenance.basis if provenance else "recorded"  # type: ignore[return-value]  # basis: "measured" or "simulated"


def _lifecycle_backend(view: StoreView) -> Basis:
    # distinct raw values first: 34k states at 128k GPUs carry two or three
    raw = {_move_backend(ev.read(LifecycleTransitionV1)) for ev in view.states.values()}
    seen = {Provenance.TWIN if r is True else Provenance.parse(r) for r in raw}
    # One basis only when every state came from the same kind of hardware.
    return _basis_of(seen.pop()) if len(seen) == 1 else "recorded"


def _move_backend(move: LifecycleTransitionV1) -> Any:
    """The driver behind a move: `backend`, or (True: the twin) the `simulated: true` or
    `driver_backend` key that controllers wrote before `backend` was a field (the model keeps
    such keys as they were written)."""
    extra = move.model_extra or {}
    if extra.get("simulated") is True:
        return True
    return move.backend or extra.get("driver_backend")


class _Mask:
    """The surviving GPUs of the current step and the reason of each drop."""

    def __init__(self, n: int) -> None:
        self.alive = np.ones(n, dtype=bool)
        self.reason = ["ok"] * n

    def drop(self, gpus: np.ndarray | list[int], code: str) -> int:
        idx = np.asarray(gpus, dtype=np.int64)
        idx = idx[self.alive[idx]]
        for g in idx.tolist():
            self.reason[g] = code
        self.alive[idx] = False
        return int(idx.size)


def build_ledger(view: StoreView, shape: JobShape | None = None) -> Ledger:
    """The seven steps of the ledger, in order; each keeps a subset of the step above."""
    build = _LedgerBuild(view, (shape or JobShape()).resolved(view.topo))
    build.headline()
    build.installed()
    build.powered()
    build.healthy()
    build.in_healthy_domain()
    build.certified()
    build.steps.append(_goodput_step(view, int(build.mask.alive.sum()), build.shape))
    build.warnings += _simulation_warnings(view)
    return Ledger(steps=build.steps, shape=build.shape, gpu_reason=build.mask.reason,
                  racks=_rack_rows(build), findings=build.findings, warnings=build.warnings)


class _LedgerBuild:
    """One build of the ledger: the surviving GPUs, and what each step learns that a later
    step (or the per-rack rows) reads."""

    def __init__(self, view: StoreView, shape: JobShape) -> None:
        self.view, self.shape, self.topo = view, shape, view.topo
        self.n = len(self.topo.gpu_ids)
        self.mask = _Mask(self.n)
        self.warnings: list[str] = []
        self.steps: list[Step] = []
        self.run = view.certify_run
        # filled by the steps below
        self.tray_state: dict[int, str | None] = {}  # tray component index -> lifecycle state
        self.rack_state: dict[str, str | None] = {}
        self.findings: list[dict[str, Any]] = []
        self.flagged = np.zeros(self.n, dtype=bool)  # GPUs a finding touched without removing
        self.degraded_domains: dict[int, str] = {}  # domain number -> fault kind degrading it
        self.healthy_alive = self.mask.alive.copy()
        self.domain_ok: list[bool] = []
        self.domain_certified: list[bool] = []
        # GPU numbers of each NVLink domain, found once (one scan per domain is quadratic)
        order = np.argsort(self.topo.gpu_domain, kind="stable")
        bounds = np.searchsorted(self.topo.gpu_domain[order], np.arange(len(self.topo.domains)
                                                                        + 1))
        self.domain_gpus = [order[bounds[d]:bounds[d + 1]] for d in range(len(self.topo.domains))]

    def record(self, key: str, label: str, reason: str, basis: Basis, source: str,
               lost: Counter[str], **extra: Any) -> Step:
        step = Step(key=key, label=label, count=int(self.mask.alive.sum()), reason=reason,
                    basis=basis, source=source,
                    lost={k: v for k, v in sorted(lost.items()) if v}, **extra)
        self.steps.append(step)
        return step

    # 1. headline
    def headline(self) -> None:
        topo, view = self.topo, self.view
        self.record("headline", "headline GPUs", Reason.FLEET_SPEC, "spec",
                    f"fleet spec {topo.spec.name!r} ({len(topo.racks)} racks) loaded in "
                    f"{view.store_url}", Counter(),
                    provenance={"fleet": topo.spec.name, "fleet_loaded_seq":
                                view.fleet_event.seq if view.fleet_event else None})

    # 2. installed
    def installed(self) -> None:
        topo, view = self.topo, self.view
        lost: Counter[str] = Counter()
        missing = [g for g, gid in enumerate(topo.gpu_ids) if gid not in view.inventory_gpus]
        lost[Reason.NOT_IN_INVENTORY] += self.mask.drop(missing, Reason.NOT_IN_INVENTORY)
        extra = len(view.inventory_gpus) - (self.n - len(missing))
        if extra:
            self.warnings.append(f"{extra} GPU rows in the inventory are not in the fleet spec")
        self.record("installed", "installed (inventory)", Reason.INVENTORY, "inventory",
                    f"components of kind gpu in {view.store_url}", lost,
                    provenance={"inventory_gpu_rows": len(view.inventory_gpus)})

    # 3. powered and cooled
    def powered(self) -> None:
        topo, view = self.topo, self.view
        lost: Counter[str] = Counter()
        has_lifecycle = bool(view.states)
        for rack in topo.racks:
            rack_state = view.state_of(rack.id)
            self.rack_state[rack.id] = rack_state
            gpus = np.arange(rack.gpu_first, rack.gpu_end)
            for tray in np.unique(topo.gpu_tray[gpus]).tolist():
                self.tray_state[tray] = view.state_of(topo.ids[tray])
            if has_lifecycle:
                self._drop_unpowered(rack.id, rack_state, gpus, lost)
        if has_lifecycle:
            seqs = [e.seq for e in view.states.values()]
            self.record("powered", "powered and cooled", Reason.LIFECYCLE,
                        _lifecycle_backend(view),
                        f"latest lifecycle.transition of {len(view.states)} racks/trays "
                        f"(event seq {min(seqs)}..{max(seqs)})", lost,
                        provenance={"components_with_state": len(view.states)})
        else:
            self.record("powered", "powered and cooled", Reason.NO_LIFECYCLE_DATA, "not_run",
                        "no lifecycle.transition events: lifecycle not run, count carried "
                        "through", lost, note="no lifecycle data")

    def _drop_unpowered(self, rack_id: str, rack_state: str | None, gpus: np.ndarray,
                        lost: Counter[str]) -> None:
        """Drop a rack's GPUs that its (or their tray's) lifecycle state leaves unpowered."""
        mask, topo = self.mask, self.topo
        if rack_state is None:
            lost[Reason.RACK_NOT_ONBOARDED] += mask.drop(gpus, Reason.RACK_NOT_ONBOARDED)
            return
        ok = rack_powered(rack_state)
        if ok is None:
            self.warnings.append(f"{rack_id}: lifecycle state {rack_state!r} unknown to the "
                                 "report")
            code = Reason.UNKNOWN_RACK_STATE.of(rack_state)
            lost[code] += mask.drop(gpus, code)
        elif not ok:
            code = Reason.RACK_STATE.of(rack_state)
            lost[code] += mask.drop(gpus, code)
            return
        for tray in np.unique(topo.gpu_tray[gpus]).tolist():
            tray_state = self.tray_state[tray]
            if tray_state is None:
                continue  # a powered rack powers trays that have no state of their own
            tray_ok = tray_powered(tray_state)
            code = (Reason.UNKNOWN_TRAY_STATE.of(tray_state) if tray_ok is None
                    else Reason.TRAY_STATE.of(tray_state))
            if tray_ok is None:
                self.warnings.append(f"{topo.ids[tray]}: lifecycle state {tray_state!r} unknown "
                                     "to the report")
            if not tray_ok:
                lost[code] += mask.drop(gpus[topo.gpu_tray[gpus] == tray], code)

    # 4. healthy
    def healthy(self) -> None:
        topo, view, run = self.topo, self.view, self.run
        lost: Counter[str] = Counter()
        if run is None:
            self.record("healthy", "healthy (certification)", Reason.CERTIFY_NOT_RUN, "not_run",
                        "no certify.run events: certification not run, count carried through",
                        lost, note="certification not run")
        else:
            of_run = run.read(CertifyRunV1)
            for ev in view.findings:
                self._apply_finding(ev, ev.read(CertifyFindingV1), lost)
            for tray, tray_state in self.tray_state.items():
                if tray_state in TRAY_OUT_OF_SERVICE:
                    gpus = np.flatnonzero(topo.gpu_tray == tray)
                    lost[Reason.TRAY_STATE.of(tray_state)] += self.mask.drop(
                        gpus, Reason.TRAY_STATE.of(tray_state))
            runs = {e.read(CertifyFindingV1).run_id for e in view.findings} | {
                e.read(CertifyResultV1).run_id for e in view.results}
            older = sorted(r for r in runs if r and r != of_run.run_id)
            since = (f"; parts the run left out keep their newest evidence, of run"
                     f"{'s' if len(older) > 1 else ''} {', '.join(older)}" if older else "")
            self.record("healthy", "healthy (certification)", Reason.CERTIFY_FINDINGS,
                        _basis_of(of_run.backend), f"certify.run {of_run.run_id} (event seq "
                        f"{run.seq}): {len(view.findings)} findings, {len(view.results)} "
                        f"results{since}", lost, provenance=_run_provenance(of_run, run.seq))
        self.healthy_alive = self.mask.alive.copy()

    def _apply_finding(self, ev: Event, p: CertifyFindingV1, lost: Counter[str]) -> None:
        """One finding: a row for the report, and the GPUs its ledger rule removes or flags."""
        topo = self.topo
        cid = p.component or ev.component_id
        eff_kind, rule = rule_for(p)
        action = effective_action(rule, p.verdict)
        row: dict[str, Any] = {"component": cid, "kind": p.kind, "stage": stage_name(p.stage),
               "verdict": p.verdict, "confidence": p.confidence, "evidence": p.evidence,
               "action": action, "rule": rule.why, "backend": p.backend, "seq": ev.seq,
               "affected_gpus": 0, "dropped_gpus": 0}
        self.findings.append(row)
        if cid == topo.spec.name:
            affected = np.arange(self.n)  # a probe that failed fleet-wide certifies nothing
        elif cid not in topo.index:
            self.warnings.append(f"finding on {cid!r}, which is not in fleet {topo.spec.name}")
            return
        else:
            affected = topo.affected_gpus(cid)
        row["affected_gpus"] = int(affected.size)
        if action == "remove":
            row["dropped_gpus"] = self.mask.drop(affected, Reason.FINDING.of(eff_kind))
            lost[Reason.FINDING.of(eff_kind)] += row["dropped_gpus"]
        elif action == "domain":
            for d in np.unique(topo.gpu_domain[affected]).tolist():
                self.degraded_domains.setdefault(d, eff_kind)
            self.flagged[affected] = True
        else:
            self.flagged[affected] = True

    # 5. inside a fully healthy NVLink domain
    def in_healthy_domain(self) -> None:
        topo, mask = self.topo, self.mask
        lost: Counter[str] = Counter()
        for d in range(len(topo.domains)):
            gpus = self.domain_gpus[d]
            if d in self.degraded_domains and mask.alive[gpus].any():
                code = Reason.DOMAIN_DEGRADED.of(self.degraded_domains[d])
                lost[code] += mask.drop(gpus, code)
            elif not mask.alive[gpus].all():
                lost[Reason.DOMAIN_PARTIAL] += mask.drop(gpus, Reason.DOMAIN_PARTIAL)
            self.domain_ok.append(bool(mask.alive[gpus].all()) and gpus.size > 0)
        prev = self.steps[-1]
        self.record("domain", "in a fully healthy NVLink domain",
                    Reason.CERTIFY_NOT_RUN if self.run is None else Reason.NVLINK_DOMAINS,
                    prev.basis,
                    f"{len(topo.domains)} NVLink domains of the topology; health from the step "
                    "above", lost, provenance=prev.provenance)

    # 6. certified for the job shape
    def certified(self) -> None:
        topo, shape, run = self.topo, self.shape, self.run
        lost: Counter[str] = Counter()
        results = {e.component_id: e.read(CertifyResultV1) for e in self.view.results}
        for d, dom in enumerate(topo.domains):
            gpus = self.domain_gpus[d]
            if not self.domain_ok[d]:
                self.domain_certified.append(False)
                continue
            code = self._uncertified_because(gpus, results.get(dom))
            if code:
                lost[code] += self.mask.drop(gpus, code)
                self.domain_certified.append(False)
                continue
            size = shape.domain_gpus(int(gpus.size))
            usable = (gpus.size // size) * size
            lost[Reason.SHAPE_REMAINDER] += self.mask.drop(gpus[usable:],
                                                           Reason.SHAPE_REMAINDER)
            self.domain_certified.append(True)
        prev = self.steps[-1]
        per_domain = ("each rack's own whole domain" if shape.gpus_per_domain is None
                      else f"{shape.gpus_per_domain} GPUs per domain")
        self.record("certified", f"certified for {shape.name}",
                    Reason.CERTIFY_NOT_RUN if run is None else Reason.CERTIFY_RESULTS,
                    prev.basis,
                    f"job shape {shape.name} ({per_domain}, stages "
                    f"{', '.join(shape.required_stages) or 'none'}); certify.result per domain",
                    lost, provenance=prev.provenance,
                    note="certification not run" if run is None else "")

    def _uncertified_because(self, gpus: np.ndarray,
                             result: CertifyResultV1 | None) -> str | None:
        """The reason code a healthy domain is not certified for the job shape, or None."""
        shape = self.shape
        if gpus.size < shape.domain_gpus(int(gpus.size)):
            return Reason.SHAPE_TOO_SMALL
        if self.run is None:
            return None
        if result is None:
            return Reason.NO_CERTIFY_RESULT
        if result.verdict != "pass":
            return Reason.DOMAIN_VERDICT.of(result.verdict)
        passed = {stage_name(x) for x in result.stages_passed}
        missing_stage = [s for s in shape.required_stages if s not in passed]
        return Reason.STAGE_NOT_PASSED.of(missing_stage[0]) if missing_stage else None

def _run_provenance(run: CertifyRunV1, seq: int) -> dict[str, Any]:
    # the fields the run's writer set (one it left out is not a provenance)
    keys = ("run_id", "backend", "seed", "faults_file", "stages", "campaign_s")
    return {k: getattr(run, k) for k in keys if k in run.model_fields_set} | {"event_seq": seq}


def _simulation_warnings(view: StoreView) -> list[str]:
    """What a reader must know about the simulation the goodput step rests on."""
    out = []
    other, sim, fleet = view.other_simulation, view.simulate_run, view.topo.spec.name
    if other is not None:
        used = f"the latest one of {fleet} (seq {sim.seq}) is used" if sim is not None else \
            f"goodput is not applied; run `rackscale simulate run --record` on fleet {fleet}"
        out.append(f"the newest simulate.run (seq {other.seq}) is of fleet "
                   f"{other.component_id!r}, not of {fleet!r}: {used}")
    if sim is None:
        return out
    run = simulation_of(sim)
    if isinstance(run, InvalidPayload):
        return [*out, f"simulate.run seq {sim.seq} is not applied: {run}"]
    gpus = len(view.topo.gpu_ids)
    if run.fleet_gpus is not None and run.fleet_gpus != gpus:
        out.append(f"simulate.run seq {sim.seq} counted {run.fleet_gpus} GPUs in fleet "
                   f"{fleet!r}; the loaded spec has {gpus}: it simulated another version "
                   "of the fleet")
    if run.pool_gpus is not None and run.pool_gpus < (run.fleet_gpus or run.pool_gpus):
        out.append(f"simulate.run seq {sim.seq} ran its job on pool {run.pool} "
                   f"({run.pool_gpus} of {run.fleet_gpus} GPUs); its ETTR is applied to "
                   "every certified GPU")
    return out


# The run's figures the goodput step's provenance names.
_PROVENANCE = ("run_id", "seed", "failure_model", "days", "trials", "ckpt_interval_min",
               "job_gpus")


def _goodput_step(view: StoreView, certified: int, shape: JobShape) -> Step:
    sim = view.simulate_run
    label = f"expected goodput under failures ({shape.name})"
    if sim is None and view.other_simulation is not None:
        other = view.other_simulation
        return Step(key="goodput", label=label, count=certified,
                    reason=Reason.SIMULATE_OTHER_FLEET,
                    basis="not_run", note=f"simulation is of fleet {other.component_id}",
                    source=f"simulate.run event seq {other.seq} is of fleet "
                    f"{other.component_id!r}: not applied to {view.topo.spec.name!r}")
    if sim is None:
        return Step(key="goodput", label=label, count=certified,
                    reason=Reason.SIMULATE_NOT_RUN,
                    basis="not_run", note="simulation not run",
                    source="no simulate.run events: count carried through")
    run = simulation_of(sim)
    found = None if isinstance(run, InvalidPayload) else failure_goodput(run)
    if isinstance(run, InvalidPayload) or found is None:
        return Step(key="goodput", label=label, count=certified,
                    reason=Reason.SIMULATE_INVALID,
                    basis="not_run", note="simulate.run has no ETTR or goodput in [0, 1]",
                    source=f"simulate.run event seq {sim.seq}: no usable goodput figure")
    frac, interval, which = found
    count = round(certified * frac, 1)
    ci = None
    if interval is not None:
        ci = [max(0.0, round(certified * interval[0], 1)),
              min(float(certified), round(certified * interval[1], 1))]
    note = ""
    if run.job_gpus != certified:
        note = (f"simulated job of {run.job_gpus} GPUs; its ETTR applied to the {certified} "
                "certified GPUs")
    prov = {k: getattr(run, k) for k in _PROVENANCE} | {
        "event_seq": sim.seq, "fraction": frac, "figure": which}
    return Step(key="goodput", label=label, count=count, reason=Reason.SIMULATED_GOODPUT,
                basis="simulated", source=f"simulate.run {run.run_id} (event seq "
                f"{sim.seq}): certified GPUs x {which} {frac:.3f}",
                lost={Reason.GOODPUT_LOSS: round(certified - count, 1)},
                provenance=prov, note=note, ci95=ci)


def _rack_rows(build: _LedgerBuild) -> list[dict[str, Any]]:
    """Per rack and tray: states, healthy and usable GPUs, findings (the report's rack table)."""
    return rack_rows(RackInputs(
        topo=build.topo, alive=build.mask.alive, healthy=build.healthy_alive,
        flagged=build.flagged, reason=build.mask.reason, tray_state=build.tray_state,
        rack_state=build.rack_state, domain_ok=build.domain_ok,
        domain_certified=build.domain_certified, findings=build.findings))
