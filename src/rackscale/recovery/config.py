"""Typed settings of a supervised job: sizes, checkpoint cadence and the detectors' thresholds.

Every default is documented here and in docs/recovery.md; a bad value fails at construction
with the field's name (the CLI turns it into exit 2).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rackscale.errors import UserError


class JobConfigError(UserError):
    pass


class DetectConfig(BaseModel):
    """Thresholds of the three detectors.

    Hang: until a rank has done `warmup_steps` steps of an attempt its timeout is
    `startup_timeout_s` (process start, restore); then it is `timeout_factor` times the longest
    gap between two heartbeats seen so far (NVRx's calculated timeouts), never under
    `hang_floor_s`. Fail-slow: each step a rank's compute time is scored against the job's
    median (median / own) and its own best (best / own); a rank whose two scores are both
    under `straggler_threshold` for `straggler_steps` consecutive steps is a straggler. Scores use
    the median of the last `smooth_steps` compute times, so one noisy step does not count.
    The job's collective time (see `CollectiveDetector`) is scored against its own best with
    the same threshold and steps, and counts only when it is also `collective_floor_s` slower
    than that best (a wall-clock figure: on a shared host a few milliseconds come and go).
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    startup_timeout_s: float = Field(default=120.0, gt=0)
    warmup_steps: int = Field(default=5, ge=1)
    timeout_factor: float = Field(default=5.0, ge=1.0)
    hang_floor_s: float = Field(default=10.0, gt=0)
    straggler_threshold: float = Field(default=0.75, gt=0, lt=1)
    straggler_steps: int = Field(default=5, ge=1)
    smooth_steps: int = Field(default=3, ge=1)
    collective_floor_s: float = Field(default=0.05, ge=0)
    straggler_off: bool = False


class JobConfig(BaseModel):
    """One supervised job: `gpus` ranks (one per GPU slot) plus `spares` hot spare slots."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    command: list[str] = Field(min_length=1)
    gpus: int = Field(ge=1, le=4096)
    spares: int = Field(default=0, ge=0, le=4096)
    ckpt_every: int = Field(default=10, ge=1)
    # The job's length, when known (`job run --steps`): a straggler flagged under two
    # checkpoint intervals from the end is left to finish rather than restarted.
    steps: int | None = Field(default=None, ge=1)
    max_restarts: int = Field(default=10, ge=0)
    poll_s: float = Field(default=0.05, gt=0, le=5)
    # How long stopped ranks get to exit after SIGKILL before the supervisor gives up on them.
    stop_timeout_s: float = Field(default=10.0, gt=0)
    # Keep a standby process per slot, the default: a restart then skips the process start.
    # Only once a rank of the command has said it takes part (warm.py); `job run` turns it
    # off for a runner that cannot keep standbys (Slurm, JobRunner.no_standbys).
    warm: bool = True
    # A recovery short of spares waits this long for repaired slots to rejoin (returns.py)
    # before the job stops; 0: it stops at once. Worth it where repairs are certified and
    # returned while the job runs (a soak): a part a minute from rejoining ended the job.
    spare_wait_s: float = Field(default=0.0, ge=0, le=86_400)
    detect: DetectConfig = Field(default_factory=DetectConfig)


def make_job_config(**fields: object) -> JobConfig:
    """A JobConfig, or a JobConfigError naming the first bad field."""
    try:
        return JobConfig.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise JobConfigError(f"job settings: {loc}: {first['msg']}") from None
