"""The recovery room's events (typed payloads, written with `Store.append_event`).

- `recovery.incident` (on the excluded GPU; on the rack when a hot rack's slots left the job
  as one): one fault, from detection to the first completed step after the restart, with
  each phase's time. Every time is measured on this run (wall
  clock of the supervisor's host), never simulated.
- `recovery.job` (on the job's id): a supervised job started, resumed or ended.
- `certify.finding` (on the excluded GPU): the exclusion, in the ladder's finding format, so
  lifecycle triage moves the part like any other finding.
"""

from __future__ import annotations

from rackscale.incidents import incident_restart_cost_s
from rackscale.store import Kind, RecoveryIncidentV1, RecoveryJobV1

INCIDENT = Kind.RECOVERY_INCIDENT
JOB = Kind.RECOVERY_JOB
FINDING = Kind.CERTIFY_FINDING

# The store's event contract owns both payloads (every reader parses them through it); the
# recovery room writes them under these names.
IncidentPayload = RecoveryIncidentV1
JobPayload = RecoveryJobV1

# A runtime symptom -> the fault kind (docs/formats.md) its finding names before any probe has
# localized it: the process or its GPU died, or the GPU is slow.
SYMPTOM_KIND = {"fail_stop": "gpu_dead", "hang": "gpu_dead", "straggler": "slow_gpu",
                "drain": "coolant_flow_low"}

restart_cost_s = incident_restart_cost_s  # the rule lives with the event contract
