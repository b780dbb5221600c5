"""Recovery: supervise a distributed training job, detect fail-stop, hangs and stragglers,
exclude the bad part, and resume every rank from the latest committed checkpoint on a spare.

The reference trainer (`trainer.py`, needs torch) is not imported here: the supervisor runs
on a host without torch, and the trainer is a command it launches.
"""

from rackscale.lazy import lazy_exports
from rackscale.recovery.config import DetectConfig, JobConfig, JobConfigError, make_job_config
from rackscale.recovery.detect import (
    CollectiveDetector,
    StragglerDetector,
    Suspect,
    Symptom,
    find_fail_stop,
    find_hang,
    timeout_of,
)
from rackscale.recovery.events import INCIDENT, JOB, IncidentPayload, JobPayload
from rackscale.recovery.heartbeat import BeatReader, HeartbeatWriter, RankBeats, beat_path
from rackscale.recovery.launch import Launcher, LaunchError, LocalLauncher, RankProcess
from rackscale.recovery.localize import Localized, Localizer, on_runner
from rackscale.recovery.racks import CoolingConditions, HotRacks, SparesExhausted
from rackscale.recovery.record import NotInFleet, Recorder, read_incidents
from rackscale.recovery.returns import Return, ReturnError, read_returns, request_return
from rackscale.recovery.setup import (
    RUNNERS,
    JobRunner,
    Site,
    UnknownRunner,
    build_setup,
    job_slots,
    job_tiers,
)
from rackscale.recovery.state import JobState, alive_ranks
from rackscale.recovery.supervisor import (
    CommandFailed,
    JobSetup,
    Supervisor,
    latest_committed,
)
from rackscale.recovery.warm import WarmPool, wait_for_rank

__all__ = [
    "INCIDENT",
    "JOB",
    "RUNNERS",
    "BeatReader",
    "CollectiveDetector",
    "CommandFailed",
    "CoolingConditions",
    "DemoSettings",
    "DetectConfig",
    "HeartbeatWriter",
    "HotRacks",
    "IncidentPayload",
    "JobConfig",
    "JobConfigError",
    "JobPayload",
    "JobRunner",
    "JobSetup",
    "JobState",
    "LaunchError",
    "Launcher",
    "LocalLauncher",
    "Localized",
    "Localizer",
    "NotInFleet",
    "RankBeats",
    "RankEnv",
    "RankProcess",
    "Recorder",
    "Return",
    "ReturnError",
    "Site",
    "SparesExhausted",
    "StragglerDetector",
    "Supervisor",
    "Suspect",
    "Symptom",
    "UnknownRunner",
    "WarmPool",
    "alive_ranks",
    "beat_path",
    "build_setup",
    "find_fail_stop",
    "find_hang",
    "job_slots",
    "job_tiers",
    "latest_committed",
    "make_job_config",
    "on_runner",
    "read_incidents",
    "read_returns",
    "request_return",
    "timeout_of",
    "train",
    "wait_for_rank",
]

_TORCH = {"DemoSettings", "RankEnv", "train"}


# The reference trainer needs torch: imported on first use, so the supervisor does not.
__getattr__ = lazy_exports(__name__, dict.fromkeys(_TORCH, "trainer"), globals())
