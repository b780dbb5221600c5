"""Findings (DESIGN.md format), their JSON lines, and the store events of a run
(docs/contracts.md: certify.run, certify.finding, certify.result)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.certify.stages import STAGE_NAMES
from rackscale.durable import write_atomic
from rackscale.store import NewEvent, Store

__all__ = ["STAGE_NAMES", "ComponentResult", "Finding", "store_run", "write_jsonl"]


@dataclass(slots=True, kw_only=True)
class Finding:
    component: str
    kind: str  # a fault kind (DESIGN.md), or "probe_error" when a probe raised
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


def store_run(store: Store, *, fleet: str, run: dict[str, Any], findings: list[Finding],
              results: list[ComponentResult], actor: str = "certify") -> int:
    """Append the run, its findings and its per-tray/rack results in one transaction."""
    run_id, backend = run["run_id"], run["backend"]
    events = [NewEvent(component_id=fleet, kind="certify.run", payload=run, actor=actor,
                       reason=f"certification run {run_id}")]
    events += [NewEvent(component_id=f.component, kind="certify.finding",
                        payload=f.as_dict() | {"run_id": run_id, "backend": backend,
                                               "verdict": f.verdict},
                        actor=actor, reason=f"{f.kind} found at stage {f.stage}")
               for f in findings]
    events += [NewEvent(component_id=r.component, kind="certify.result",
                        payload={"run_id": run_id, "backend": backend, "verdict": r.verdict,
                                 "stages_passed": r.stages_passed} | r.extra,
                        actor=actor, reason=f"certification run {run_id}")
               for r in results]
    with store.session() as s:
        return store.append_events(events, session=s)
