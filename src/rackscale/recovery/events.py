"""The recovery room's events (typed payloads, written with `Store.append_event`).

- `recovery.incident` (on the excluded GPU): one fault, from detection to the first completed
  step after the restart, with each phase's time. Every time is measured on this run (wall
  clock of the supervisor's host), never simulated.
- `recovery.job` (on the job's id): a supervised job started, resumed or ended.
- `certify.finding` (on the excluded GPU): the exclusion, in the ladder's finding format, so
  lifecycle triage moves the part like any other finding.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rackscale.incidents import RECOVERY_INCIDENT, incident_restart_cost_s

INCIDENT = RECOVERY_INCIDENT
JOB = "recovery.job"
FINDING = "certify.finding"

# A runtime symptom -> the fault kind (DESIGN.md) its finding names before any probe has
# localized it: the process or its GPU died, or the GPU is slow.
SYMPTOM_KIND = {"fail_stop": "gpu_dead", "hang": "gpu_dead", "straggler": "slow_gpu"}


class IncidentPayload(BaseModel):
    """One recovery, every figure measured. Times in seconds:
    `detect_s` from the rank's last heartbeat (fail-stop, hang) or its first under-threshold
    step (straggler) to the decision; `stop_s` to stop every old rank; `localize_s` the
    targeted probe of a straggler's GPU and NIC after that (0 when none ran: its component
    and `fault_kind` are then the symptom's, else the probe's, with its figures in
    `evidence.localize`); `restart_s` decision to every new rank launched; `start_s` launch to every
    new process running (interpreter and imports); `restore_s` the slowest rank's checkpoint
    load (as the rank timed it); `first_step_s` launch to every rank's first step;
    `downtime_s` decision to that first step. `work_lost_steps`: steps done past the checkpoint
    the job resumed from; `step_s` the job's median step time before the fault (steps of the
    ranks that did not fail), so the lost work is `work_lost_steps` x `step_s` seconds;
    `host` the supervisor's host (where every time was measured).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    job: str
    attempt: int
    symptom: Literal["fail_stop", "hang", "straggler"]
    rank: int
    component: str
    fault_kind: str
    slot: str | None = None  # the GPU slot the rank left, when `component` is another part
    spare: str | None
    evidence: dict[str, Any] = Field(default_factory=dict)
    detected_at: float
    detect_s: float | None
    detect_steps: int | None = None
    localize_s: float
    stop_s: float
    restart_s: float | None = None
    start_s: float | None = None
    restore_s: float | None = None
    first_step_s: float | None = None
    downtime_s: float | None = None
    ckpt_id: str | None
    ckpt_step: int
    work_lost_steps: int
    step_s: float | None = None
    host: str | None = None
    outcome: Literal["resumed", "no_spare", "supervisor_gone", "failed_again",
                     "unlocalized"] = "resumed"
    measured: Literal["measured"] = "measured"


restart_cost_s = incident_restart_cost_s  # the rule lives with the event contract



class JobPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    job: str
    status: Literal["started", "resumed", "finished", "failed"]
    gpus: int
    spares_left: int
    excluded: list[str]
    attempt: int
    ckpt_id: str | None = None
    message: str = ""
