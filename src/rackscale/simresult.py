"""The typed result of one simulated run: what `rackscale.simulate.run` returns, what its
`simulate.run` event stores, and what the report and the CLI read.

One declaration for three rooms: the simulator makes a `SimResult`, the store's `SimulateRunV1`
payload model takes its fields from `SimRunRecord` (the part of the result every version-1
event has), and the report reads a stored payload back as that model. Like
`rackscale.provenance` it imports nothing of rackscale, so the simulator (which may not import
the store) and the store (which may not import the simulator) can both use it.

Every figure here is simulated (discrete-event model with published failure rates); hours are
per trial. Figures may be NaN (a CI of one trial, a Young/Daly interval with no checkpoint
cost) or infinite (the MTTF of a run without interruptions); JSON output writes those as null.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["Goodput", "MeanCI", "SimResult", "SimRunRecord", "SimulatedJob", "YoungDaly"]


class MeanCI(BaseModel):
    """A mean over the trials and its 95% confidence interval: the half-width (the simulator's
    form) or `[low, high]`."""

    model_config = ConfigDict(extra="allow", frozen=True)
    mean: float
    ci95: float | list[float] | None = None


class Goodput(BaseModel):
    """Goodput = scheduling x runtime x program (the mean over the trials)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    scheduling: float | None = Field(None, description="held time / wall time")
    runtime: float | None = Field(None, description="useful wall time / held time")
    program: float | None = Field(None, description="work / useful wall time x MFU")
    total: float = Field(description="ETTR x MFU")


class SimulatedJob(BaseModel):
    """The job a simulation ran, as every simulate.* event names it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    fleet: str = Field(description="the fleet's name (the event's component)")
    simulated: Literal[True] = Field(description="always true: no figure here is measured")
    job_gpus: int = Field(description="GPUs the job asked for")
    days: float = Field(description="simulated wall-clock days per trial")
    trials: int = Field(description="Monte Carlo trials")
    seed: int = Field(description="random seed of the failures")


class YoungDaly(BaseModel):
    """The Young and Daly checkpoint intervals of a run's failure rate and checkpoint cost."""

    model_config = ConfigDict(extra="allow", frozen=True)
    young_min: float | None = Field(None, description="Young's checkpoint interval, minutes")
    daly_min: float | None = Field(None, description="Daly's checkpoint interval, minutes")


class SimRunRecord(YoungDaly, SimulatedJob):
    """The fields of a `simulate.run` event (docs/contracts.md): every version-1 payload has
    the required ones; the store's `SimulateRunV1` is this plus the event's version."""

    model_config = ConfigDict(extra="allow", frozen=True)
    run_id: str = Field(description="sim-<12 hex>: names this run in the report")
    failure_model: str = Field(description="failure model name (llama3, rsc-1, rsc-2, ...)")
    ckpt_interval_min: float = Field(description="checkpoint interval, minutes")
    ettr: MeanCI = Field(description="effective training time ratio: work / wall time")
    goodput: Goodput
    goodput_ci95: dict[str, float] | None = Field(
        None, description="95% half-width of each goodput factor")
    job_mttf_h: float | None = Field(None, description="wall hours per interruption")
    interruptions_by_cause: dict[str, float] = Field(
        {}, description="interruptions per trial by failure cause")
    lost_hours_by_cause: dict[str, float] = Field(
        {}, description="hours lost per trial: recompute, restart, detection, waiting for "
        "repair or spare, checkpoint writes, straggler slowdown")
    fleet_gpus: int | None = Field(None, description="every GPU of the fleet")
    pool: str | None = Field(None, description="the rack template or GPU SKU the job ran on")
    pool_gpus: int | None = Field(None, description="the GPUs of that pool")
    storage: dict[str, Any] | None = Field(
        None, description="the measured storage figures it used (--storage), labelled")
    recovery: dict[str, Any] | None = Field(
        None, description="the restart cost it used: measured (--recovery) or assumed")


class SimResult(SimRunRecord):
    """The whole result of one run (`simulate.run`): the record's fields, all present, and the
    plan and engine figures beside them. A value of the wrong type or a key it does not name
    is refused (pydantic's ValidationError names the field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    note: str = Field(description="what the figures are: simulated, and by which model")
    fleet_gpus: int
    pool: str
    pool_template: str = Field(description="the rack template of the pool")
    pool_gpus: int
    job_gpus_allocated: int = Field(description="GPUs the job holds (whole units)")
    align: Literal["domain", "tray"] = Field(description="the unit a job is placed in")
    units_job: int = Field(description="units (domains or trays) the job holds")
    units_spare: int = Field(description="units left free beside the job (hot spares)")
    ckpt_cost_s: float = Field(description="blocking checkpoint write, seconds")
    restart_min: float = Field(description="restart overhead u0, minutes")
    spare_trays: int = Field(description="hot-spare trays kept idle per domain")
    escalate_at: int = Field(description="trays out that send a rack to repair (0: never)")
    goodput_ci95: dict[str, float]
    job_mttf_h: float
    job_mtbf_model_h: float = Field(description="the failure model's job MTBF, hours")
    interruptions: MeanCI = Field(description="interruptions per trial")
    interruptions_by_kind: dict[str, float] = Field(
        description="interruptions per trial by fault kind")
    stragglers: float = Field(description="fail-slow episodes per trial")
    rack_escalations: float = Field(description="racks sent to repair per trial")
    unit_swaps: float = Field(description="swaps onto a hot spare per trial")
    young_min: float
    daly_min: float
    engine_steps: int = Field(description="events the engine stepped through")
    wall_s: float = Field(description="seconds the simulation took (measured)")

    def payload(self) -> dict[str, Any]:
        """The `simulate.run` event payload: the whole result (`storage` and `recovery` only
        when the run used them), so the stored event reads back as the same result."""
        return self.model_dump(exclude={k for k in ("storage", "recovery")
                                        if getattr(self, k) is None})

    def as_dict(self) -> dict[str, Any]:
        """The result as `simulate run --json` prints it (the same keys as the payload)."""
        return self.payload()

    def with_(self, **update: Any) -> SimResult:
        """A copy with `update` applied, validated like a new result."""
        return SimResult.model_validate(self.model_dump() | update)
