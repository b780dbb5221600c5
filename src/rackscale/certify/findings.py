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
from rackscale.store import Kind, NewEvent, Store, TwinPlantV1

__all__ = ["STAGE_NAMES", "ComponentResult", "Finding", "store_run", "write_jsonl"]


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
