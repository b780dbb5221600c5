"""Where the supervisor's events go: the store's event log (`--db`), and always a JSON-lines
copy in the job directory (`incidents.jsonl`), so a job run without a database still keeps
its incidents and `rackscale job incidents --job-dir` can list them."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.recovery.events import (
    FINDING,
    INCIDENT,
    JOB,
    SYMPTOM_KIND,
    IncidentPayload,
    JobPayload,
)
from rackscale.recovery.state import JobState
from rackscale.store import Kind, Store, carried_payload


class NotInFleet(UserError):
    """A job's finding or incident names a part the store's fleet does not have."""


JOB_PREFIX = "job/"  # events on the job itself (its record, an incident with no one suspect)


def not_in_fleet(cid: str, fleet: Topology, where: str) -> NotInFleet:
    return NotInFleet(
        f"{cid} is not a component of fleet {fleet.spec.name} loaded in {where}: its finding "
        "would name a part the fleet does not have, and lifecycle could not act on it. Fix: "
        "run the job on that fleet's GPUs (`--runner local` places its slots on them; a lab "
        "or Slurm cluster must be of that fleet), load the fleet the job runs on with "
        "`rackscale fleet load`, or record the job in another store (--db sqlite:///job.db)")


class Recorder:
    """`fleet`: the fleet loaded in `store`; every finding and incident must name one of its
    parts (the check runs before anything is written)."""

    def __init__(self, job_dir: Path, store: Store | None = None,
                 actor: str = "rackscale-job", *, fleet: Topology | None = None) -> None:
        self.job_dir, self.store, self.actor, self.fleet = job_dir, store, actor, fleet

    def check_component(self, component: str, kind: Kind) -> None:
        """Refuse an event on a part outside the store's fleet (the job's own id passes)."""
        if self.store is None or self.fleet is None or component in self.fleet.index:
            return
        if kind != FINDING and component.startswith(JOB_PREFIX):
            return
        raise not_in_fleet(component, self.fleet, self.store.safe_url)

    def _append(self, component: str, kind: Kind, payload: dict[str, Any], reason: str) -> None:
        self.check_component(component, kind)
        line = {"time": time.time(), "component": component, "kind": kind,
                "payload": payload}
        with (self.job_dir / "incidents.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        if self.store is not None:
            self.store.append_event(component, kind, payload=payload, actor=self.actor,
                                    reason=reason)

    def exclude(self, inc: IncidentPayload) -> str:
        """The exclusion as a certify finding on the part; returns the fault kind it names."""
        kind = inc.fault_kind or SYMPTOM_KIND[inc.symptom]  # the probe's, when one ran
        finding = {"component": inc.component, "kind": kind, "stage": 1,
                   "evidence": {"source": "recovery", "symptom": inc.symptom, "job": inc.job,
                                "attempt": inc.attempt, **inc.evidence},
                   "confidence": 0.6, "verdict": "fail", "run_id": f"job-{inc.job}",
                   "backend": "real"}
        self._append(inc.component, FINDING, finding,
                     f"{inc.symptom} of rank {inc.rank} in job {inc.job}: excluded")
        return kind

    def incident(self, inc: IncidentPayload) -> None:
        self._append(inc.component, INCIDENT, inc.model_dump(mode="json"),
                     f"{inc.symptom} in job {inc.job}: {inc.outcome}")

    def job(self, st: JobState, status: str, ckpt_id: str | None, message: str = "",
            slots: list[str] | None = None) -> None:
        p = JobPayload(job=st.job, status=status, gpus=st.gpus,
                       spares_left=len(st.spares), excluded=sorted(st.excluded),
                       attempt=st.attempt, ckpt_id=ckpt_id, message=message,
                       slots=slots or [])
        self._append(f"job/{st.job}", JOB, p.model_dump(mode="json"), f"job {status}")


def read_incidents(job_dir: Path | None = None, store: Store | None = None,
                   job: str | None = None) -> list[dict[str, Any]]:
    """Incidents from the store when given, else from the job directory's copy."""
    if store is not None:
        rows = [e.read(IncidentPayload).dump() | {"seq": e.seq, "time": e.time.isoformat()}
                for e in store.events(kind=INCIDENT)]
    elif job_dir is not None and (job_dir / "incidents.jsonl").exists():
        lines = (job_dir / "incidents.jsonl").read_text(encoding="utf-8").splitlines()
        rows = [carried_payload(d, IncidentPayload).dump()
                for d in map(json.loads, filter(None, lines)) if d["kind"] == INCIDENT]
    else:
        rows = []
    return [r for r in rows if job is None or r.get("job") == job]
