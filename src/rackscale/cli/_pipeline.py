"""The demo's pipeline: the context its steps share, the step type, and each step's typed
result.

Kept apart from `cli/demo.py` so that the noun modules, which each define their room's demo
step, import this and not the demo (which imports them): no import circle between the demo and
every noun. One channel between steps: a step reads what earlier steps left in
`ctx.results` (a `DemoResults`, one typed field per step) or in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rackscale.certify import CertifyRun
from rackscale.checkpoint import DemoCheckpoint
from rackscale.fleet import Topology
from rackscale.lifecycle import Controller, TriageReport
from rackscale.simulate import SimResult
from rackscale.store import LoadResult, Store


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetStepResult:
    """The fleet step: the topology's summary and what loading it into the inventory did."""

    summary: dict[str, Any]
    load: LoadResult


@dataclass(frozen=True, slots=True, kw_only=True)
class Onboarding:
    """Lifecycle onboarding: the moves it made and the racks whose coolant flow was verified
    before their power came on."""

    transitions: int
    passes: int
    flow_before_power: int
    racks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Triage:
    """Lifecycle triage: what it did with the certification evidence it found."""

    report: TriageReport
    findings_seen: int  # certify.finding events in the store when triage ran
    results_present: bool  # any certify.result event


@dataclass(slots=True, kw_only=True)
class LifecycleStepResult:
    """Both lifecycle steps (onboarding, then triage) on the simulated plant; `counts` is
    the state count after the latest of them (`lifecycle.counts`)."""

    counts: dict[str, dict[str, int]]
    onboarding: Onboarding | None = None
    triage: Triage | None = None
    backend: str = "simulated"


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulateStepResult:
    """The simulate step: the job it sized and why, and the run (None: skipped, `skipped`
    says why)."""

    job_gpus: int
    how: str
    result: SimResult | None
    skipped: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportStepResult:
    """The report step: where the report is, its ledger counts, and its evidence."""

    html: Path
    json: Path
    ledger: dict[str, float]
    evidence_root: str
    verified: bool


@dataclass(slots=True)
class DemoResults:
    """Each step's result, None until that step ran."""

    fleet: FleetStepResult | None = None
    lifecycle: LifecycleStepResult | None = None
    certify: CertifyRun | None = None
    checkpoint: DemoCheckpoint | None = None
    simulate: SimulateStepResult | None = None
    report: ReportStepResult | None = None


@dataclass(slots=True, kw_only=True)
class DemoContext:
    """What every step of one demo run shares: the topology (built once), the store, the seed,
    the data directory, the steps' results, and the one lifecycle controller of the run."""

    topo: Topology
    store: Store
    seed: int
    data_dir: Path
    results: DemoResults = field(default_factory=DemoResults)
    # The lifecycle controller, built by the first lifecycle step and reused by the next, so
    # onboarding and triage drive the same plant through the same controller.
    controller: Controller | None = None


class Step(NamedTuple):
    name: str
    title: str
    run: Callable[[DemoContext], None]
