"""Findings (docs/formats.md), their JSON lines, and the store events of a run
(docs/contracts.md: certify.run, certify.finding, certify.result)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.certify.stages import STAGE_NAMES
from rackscale.durable import write_atomic
from rackscale.faults import FaultsFile
from rackscale.fleet import is_within
from rackscale.store import Kind, NewEvent, Store, TwinPlantV1

__all__ = ["STAGE_NAMES", "ComponentResult", "Finding", "store_run", "write_jsonl"]


def stage_label(stage: object) -> str:
    """A stage as listings show and filter it: a ladder stage by its name (1 and "1" are
    "gpu"), any other (telemetry's, a recovery's) as given."""
    if isinstance(stage, int) or (isinstance(stage, str) and stage.isdigit()):
        return STAGE_NAMES.get(int(stage), str(stage))
    return str(stage)


@dataclass(frozen=True, slots=True)
class FindingsFilter:
    """Which findings a listing shows, and in what order: the one definition behind
    `certify findings` and `GET /api/v1/findings`, whose defaults (everything) are these."""

    kind: str | None = None
    rack: str | None = None  # a rack (or any part): the findings on it and on parts under it
    stage: str | None = None  # a stage's number or name

    def matches(self, component: str, kind: str, stage: object) -> bool:
        return ((self.kind is None or kind == self.kind)
                and (self.rack is None or is_within(component, self.rack))
                and (self.stage is None or stage_label(stage) == stage_label(self.stage)))

    @staticmethod
    def order(component: str, seq: int | None) -> tuple[int, str]:
        """The listing's order: as recorded (the event's seq), then by part."""
        return (seq if seq is not None else -1, component)


@dataclass(slots=True, kw_only=True)
class Finding:
    component: str
    kind: str  # a fault kind (docs/formats.md), or "probe_error" when a probe raised
    stage: int
    evidence: dict[str, Any]
    confidence: float
    verdict: str = "fail"

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "kind": self.kind, "stage": self.stage,
                "evidence": self.evidence, "confidence": self.confidence}


def write_jsonl(findings: Iterable[Finding], path: str | Path, *, run_id: str,
                backend: str) -> int:
    p = Path(path)
    lines = [json.dumps(f.as_dict() | {"run_id": run_id, "backend": backend,
                                       "verdict": f.verdict}, default=str) + "\n"
             for f in findings]
    # Earlier runs' lines and this run's, replaced at once: an append cut by a kill would
    # leave a half line that breaks every reader of the file.
    old = p.read_text(encoding="utf-8") if p.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    write_atomic(p, old + "".join(lines))
    return len(lines)


@dataclass(slots=True, kw_only=True)
class ComponentResult:
    """Production evidence for one tray/node or rack (contract: certify.result)."""

    component: str
    verdict: str  # pass | fail | not_run
    stages_passed: list[int]
    extra: dict[str, Any] = field(default_factory=dict)


def twin_plant(faults: FaultsFile | None, faults_file: str | None, seed: int) -> TwinPlantV1:
    """The twin's plant a run applied: its faults as the file gave them (none: a clean plant)."""
    return TwinPlantV1.model_validate({
        "faults_file": faults_file, "seed": seed,
        "faults": [f.model_dump(exclude_none=True) for f in (faults.faults if faults else [])]})


def store_run(store: Store, *, fleet: str, run: dict[str, Any], findings: list[Finding],
              results: list[ComponentResult], actor: str = "certify",
              plant: TwinPlantV1 | None = None) -> int:
    """Append the run, its findings and its per-tray/rack results in one transaction (and,
    on the twin, the plant it ran on, last: the state every later reader of the twin sees;
    a run's own events open its stretch of the log)."""
    run_id, backend = run["run_id"], run["backend"]
    events = [NewEvent(component_id=fleet, kind=Kind.CERTIFY_RUN, payload=run, actor=actor,
                       reason=f"certification run {run_id}")]
    events += [NewEvent(component_id=f.component, kind=Kind.CERTIFY_FINDING,
                        payload=f.as_dict() | {"run_id": run_id, "backend": backend,
                                               "verdict": f.verdict},
                        actor=actor, reason=f"{f.kind} found at stage {f.stage}")
               for f in findings]
    events += [NewEvent(component_id=r.component, kind=Kind.CERTIFY_RESULT,
                        payload={"run_id": run_id, "backend": backend, "verdict": r.verdict,
                                 "stages_passed": r.stages_passed} | r.extra,
                        actor=actor, reason=f"certification run {run_id}")
               for r in results]
    if plant is not None:
        events.append(NewEvent(component_id=fleet, kind=Kind.TWIN_PLANT, payload=plant,
                               actor=actor, reason=f"twin plant of certification run {run_id}"))
    with store.session() as s:
        return store.append_events(events, session=s)
