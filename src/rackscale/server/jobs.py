"""Certification runs started through the API: one background thread per run, on the twin.

A run is the same ladder `rackscale certify run --backend twin` runs, over the fleet loaded
in the store, stored the same way (a `certify.run` event and its findings). One run at a time:
a second start while one runs is refused (409), since both would certify the same fleet.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from enum import StrEnum
from typing import Any, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackscale.certify import (
    DEFAULT_TWIN_SEED,
    DEMO_FAULTS,
    LadderConfig,
    TwinRunRequest,
    record_run,
    run_on_twin,
)
from rackscale.errors import UserError
from rackscale.fleet import Topology
from rackscale.redact import redact
from rackscale.server.api import ERRORS, MUTATION_ERRORS, require_token
from rackscale.server.errors import ApiError
from rackscale.store import Store, loaded_spec

log = logging.getLogger("rackscale.server")
MAX_KEPT = 100  # finished jobs remembered for their status URL (oldest dropped first)


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


TRANSITIONS: dict[JobState, set[JobState]] = {
    JobState.QUEUED: {JobState.RUNNING, JobState.FAILED},
    JobState.RUNNING: {JobState.SUCCEEDED, JobState.FAILED},
    JobState.SUCCEEDED: set(),
    JobState.FAILED: set(),
}


class CertifyRequest(BaseModel):
    """What a run certifies. Faults are the shipped demo faults or none: the server never opens
    a file named by a request. An empty body is a clean run (no faults), as `rackscale certify
    run` without --faults."""

    model_config = ConfigDict(extra="forbid")
    backend: Literal["twin"] = Field("twin", description="Only the digital twin runs from "
                                     "the API.")
    faults: Literal["demo", "none"] = Field("none", description="Faults the twin applies: "
                                            "none (a clean run) or the shipped demo faults.")
    stages: list[int] = Field(default=[1, 2, 3, 4], min_length=1, max_length=4)
    seed: int = Field(DEFAULT_TWIN_SEED, ge=0, le=2**31 - 1, description="Random seed of the "
                      "digital twin (the CLI's --seed).")
    twin_seed: int | None = Field(None, ge=0, le=2**31 - 1, deprecated=True,
                                  description="Deprecated name of `seed`.")
    repeats: int = Field(8, ge=1, le=64)

    @model_validator(mode="before")
    @classmethod
    def _one_seed(cls, data: Any) -> Any:
        """`twin_seed` (the old name) is read as `seed`; both, differing, are refused."""
        if isinstance(data, dict) and data.get("twin_seed") is not None:
            data = dict(data)
            old = data.pop("twin_seed")
            if data.get("seed", old) != old:
                raise ValueError("give the seed once: `seed` (`twin_seed` is its deprecated "
                                 "name)")
            data["seed"] = old
        return data

    def twin_run(self) -> TwinRunRequest:
        """The certify room's request (its LadderConfig checks the stages: a UserError)."""
        return TwinRunRequest(config=LadderConfig(stages=tuple(self.stages),
                                                  repeats=self.repeats),
                              seed=self.seed, faults=DEMO_FAULTS if self.faults == "demo"
                              else None)

    def echoed(self) -> dict[str, Any]:
        """The request as a job's status shows it; `twin_seed` too, for older clients."""
        return self.model_dump(exclude={"twin_seed"}) | {"twin_seed": self.seed}


class CertifyJob:
    def __init__(self, req: CertifyRequest) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.req = req
        self.state = JobState.QUEUED
        self.stage: int | None = None
        self.message = ""
        self.run_id: str | None = None
        self.findings: int | None = None
        self.error: str | None = None
        self.created = time.time()
        self.finished: float | None = None

    def move(self, dst: JobState) -> None:
        if dst not in TRANSITIONS[self.state]:
            raise RuntimeError(f"certify job {self.id}: {self.state} -> {dst} is not legal")
        self.state = dst

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "state": self.state.value, "request": self.req.echoed(),
                "stage": self.stage, "message": self.message, "run_id": self.run_id,
                "findings": self.findings, "error": self.error, "created": self.created,
                "finished": self.finished, "basis": "simulated",
                "status_url": f"/api/v1/certify/jobs/{self.id}"}


class CertifyJobs:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._jobs: dict[str, CertifyJob] = {}

    def get(self, job_id: str) -> CertifyJob | None:
        return self._jobs.get(job_id)

    def start(self, req: CertifyRequest) -> CertifyJob:
        spec = loaded_spec(self.store)
        if spec is None:
            raise ApiError(409, "no fleet is loaded in this store; load one with "
                           "`rackscale fleet load` before certifying it")
        try:
            ask = req.twin_run()
        except UserError as err:
            raise ApiError(422, str(err)) from None
        with self._lock:
            busy = [j for j in self._jobs.values()
                    if j.state in (JobState.QUEUED, JobState.RUNNING)]
            if busy:
                raise ApiError(409, f"certification job {busy[0].id} is still "
                               f"{busy[0].state.value}; wait for it "
                               f"({busy[0].as_dict()['status_url']})")
            job = CertifyJob(req)
            self._jobs[job.id] = job
            for old in list(self._jobs)[:-MAX_KEPT]:
                del self._jobs[old]
        threading.Thread(target=self._run, args=(job, Topology.build(spec), ask),
                         name=f"rackscale-certify-{job.id}", daemon=True).start()
        return job

    def _run(self, job: CertifyJob, topo: Topology, ask: TwinRunRequest) -> None:
        job.move(JobState.RUNNING)
        try:
            def progress(stage: int, msg: str) -> None:
                job.stage, job.message = stage, msg

            run = run_on_twin(topo, ask, progress)
            record_run(self.store, run)
            job.run_id, job.findings = run.run_id, len(run.findings)
            job.move(JobState.SUCCEEDED)
        except Exception as err:  # the status URL says it failed; the log has the traceback
            log.exception("certification job %s failed", job.id)
            # A user error says what to fix; anything else may hold internals (a DB URL).
            job.error = (redact(str(err)) if isinstance(err, UserError) else
                         f"{type(err).__name__} (the server log has the details)")[:500]
            job.move(JobState.FAILED)
        finally:
            job.finished = time.time()


# ------------------------------------------------------------------------------------ the API
router = APIRouter(prefix="/api/v1", responses=ERRORS)


@router.post("/certify/runs", status_code=202, responses=MUTATION_ERRORS,
             summary="Start a certification run on the twin (needs the token); answers 202 "
             "with the job's status URL in Location", dependencies=[Depends(require_token)])
def start_certify(request: Request, response: Response,
                  body: CertifyRequest | None = None) -> dict[str, Any]:
    job = request.app.state.jobs.start(body or CertifyRequest())
    out: dict[str, Any] = job.as_dict()  # app.state is untyped
    response.headers["Location"] = out["status_url"]
    return out


@router.get("/certify/jobs/{job_id}", summary="A certification job's status")
def certify_job(request: Request,
                job_id: str = Path(..., max_length=32, pattern=r"^[0-9a-f]{1,32}$"),
                ) -> dict[str, Any]:
    job = request.app.state.jobs.get(job_id)
    if job is None:
        raise ApiError(404, f"no certification job {job_id!r} (jobs are kept in memory "
                       f"until the server restarts, the last {MAX_KEPT})")
    out: dict[str, Any] = job.as_dict()  # app.state is untyped
    return out
