"""The simulation's inputs: a validated config, and the plan it resolves to on a given fleet.

`SimConfig` holds the job and the policies (all times in the units their names say). `plan()`
checks it against a fleet (a job larger than the fleet is an error) and turns it into the
numbers the engines use, all in hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rackscale.errors import UserError
from rackscale.fleet import FleetSpec, get_template
from rackscale.simulate.models import (
    FAILURE_MODELS,
    SCOPES,
    STRAGGLER,
    Cause,
    failure_model,
)
from rackscale.simulate.storage import HOURS_PER_YEAR, REGION_LOSS, StorageTimes, cause_arrays

# Upper bounds of every time and factor the simulator takes: a value past them is a typo (a
# restart of 1e300 minutes printed a table of nonsense, and products of such values
# overflow to inf). Generous: each is far past any real job.
MAX_EVENT_MIN = 7 * 24 * 60.0  # a restart, a start, a detection: a week
MAX_CKPT_COST_S = 86_400.0  # one blocking checkpoint write: a day
MAX_INTERVAL_MIN = 3650 * 24 * 60.0  # a checkpoint interval: the longest run (ten years)
MAX_REPAIR_H = 8760.0  # a whole-rack repair: a year
MAX_FACTOR = 1000.0  # --repair-scale, --straggler-slowdown
# A soak compresses a year of published failure rates into minutes of lab time: one measured
# 518,287x. The draw count this buys is bounded by the memory check, not by this figure.
MAX_RATE_SCALE = 1e9
Minutes = Annotated[float, Field(ge=0, le=MAX_EVENT_MIN)]


MAX_CELLS = 50_000_000
# Ten years of simulated wall clock: a training job's horizon, and a bound on a run's time.
MAX_DAYS = 3650.0
# Fail-slow at most 100x as often as fail-stop: beyond that the job is never up (and the draw
# count, fail-stop plus fail-slow, is what the memory check bounds).
MAX_STRAGGLER_RATIO = 100.0


class SimulateError(UserError):
    pass


class SimConfig(BaseModel):
    """A job and its policies. Defaults marked (assumption) are not published figures."""

    # No inf/nan: `--days inf` would never finish, a NaN rate poisons every figure.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    job_gpus: Annotated[int, Field(gt=0)]
    days: Annotated[float, Field(gt=0, le=MAX_DAYS)] = 30.0
    trials: Annotated[int, Field(ge=1, le=100_000)] = 100
    seed: Annotated[int, Field(ge=0)] = 0
    failure_model: str = "llama3"
    # multiplies every failure rate
    rate_scale: Annotated[float, Field(gt=0, le=MAX_RATE_SCALE)] = 1.0
    # "domain": the job takes whole NVLink domains (NVL72 racks, HGX nodes); "tray": any trays.
    align: Literal["domain", "tray"] = "domain"
    # fault-free compute between checkpoints
    ckpt_interval_min: Annotated[float, Field(gt=0, le=MAX_INTERVAL_MIN)] = 30.0
    # blocking checkpoint write (docs/figures.md, Young/Daly)
    ckpt_cost_s: Annotated[float, Field(ge=0, le=MAX_CKPT_COST_S)] = 60.0
    restart_min: Minutes = 5.0  # u0: reschedule + reload + warm-up (Meta's check uses 5 min)
    # Launch to the job's first step, counted as restart time (0: the job computes from the
    # start). A horizon of days hides it; a run of minutes (a measured soak) does not.
    start_min: Minutes = 0.0
    detect_min: Minutes | None = None  # overrides every cause's detection latency
    # Fail-slow: rate as a fraction of the fail-stop rate (assumption), the whole job's
    # slowdown while one is present (3.04x: ByteDance OSDI'25, single faulty worker), and how
    # long straggler detection takes to find it (assumption).
    straggler_ratio: Annotated[float, Field(ge=0, le=MAX_STRAGGLER_RATIO)] = 0.1
    straggler_slowdown: Annotated[float, Field(ge=1, le=MAX_FACTOR)] = 3.04
    straggler_detect_min: Minutes = 30.0
    spare_domains: Annotated[int, Field(ge=0)] | None = None  # None: every unit the job leaves
    spare_trays: Annotated[int, Field(ge=0)] = 0  # hot-spare trays kept idle in each domain
    # Trays out at once that send a whole rack to repair (0: never); None: the rack
    # template's rule (an NVL72 rack is cordoned with more than 2 trays out, so at 3).
    escalate_at: Annotated[int, Field(ge=0)] | None = None
    # whole-rack repair after escalation (assumption)
    rack_repair_h: Annotated[float, Field(gt=0, le=MAX_REPAIR_H)] = 12.0
    repair_scale: Annotated[float, Field(gt=0, le=MAX_FACTOR)] = 1.0  # every per-cause repair
    mfu: Annotated[float, Field(gt=0, le=1)] = 1.0  # program goodput's model-FLOPs share
    # Measured checkpoint figures scaled to the job (simulate.storage); None: ckpt_cost_s is the
    # blocking write and restart_min the whole restart, as typed in.
    storage: StorageTimes | None = None

    @field_validator("failure_model")
    @classmethod
    def _known_model(cls, v: str) -> str:
        if v not in FAILURE_MODELS:
            raise ValueError(FAILURE_MODELS.unknown_message(v))
        return v


def make_config(**values: object) -> SimConfig:
    """SimConfig from keyword values; a bad value raises SimulateError naming field and fix."""
    try:
        return SimConfig(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as err:
        lines = []
        for e in err.errors():
            field = ".".join(str(p) for p in e["loc"]) or "config"
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{field.replace('_', '-')}: {msg} (got {e.get('input')!r})")
        raise SimulateError("invalid simulation input: " + "; ".join(lines)) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetShape:
    """What the simulator needs of a fleet: the NVLink domains of the pool the job runs on.

    A training job runs on one kind of hardware, so on a mixed fleet it takes one *pool*: the
    racks of one rack template, or of every template with one GPU SKU (`pool=`). Without a
    choice the pool is the fleet's largest by GPUs (ties: the first name in sorted order)."""

    name: str
    domains: int
    trays_per_domain: int  # 18 compute trays of an NVL72 rack; 1 node of an HGX domain
    gpus_per_tray: int
    template: str  # the pool's rack template(s)
    pool: str = ""  # what the job runs on: a template or GPU SKU name
    fleet_gpus: int | None = None  # every GPU of the fleet (None: the pool is the fleet)

    @property
    def gpus(self) -> int:
        return self.domains * self.trays_per_domain * self.gpus_per_tray

    @property
    def mixed(self) -> bool:
        """True when the fleet holds GPUs outside the job's pool."""
        return self.fleet_gpus is not None and self.fleet_gpus != self.gpus

    def describe(self) -> str:
        if not self.mixed:
            return f"fleet {self.name} ({self.gpus} GPUs)"
        return (f"pool {self.pool} ({self.gpus} of the {self.fleet_gpus} GPUs of fleet "
                f"{self.name})")

    @classmethod
    def from_spec(cls, spec: FleetSpec, pool: str | None = None) -> FleetShape:
        per: dict[str, list[tuple[int, int, int]]] = {}  # template -> (domains, trays, gpt)
        for region in spec.regions:
            for group in region.racks:
                t = get_template(group.template)
                if t.domain_is_rack:
                    per.setdefault(t.name, []).append((group.rack_count, t.trays,
                                                       t.gpus_per_tray))
                else:  # an HGX node is its own NVLink domain
                    per.setdefault(t.name, []).append(
                        (group.rack_count * (group.nodes_per_rack or t.trays), 1,
                         t.gpus_per_tray))
        gpus = {name: sum(d * tr * g for d, tr, g in v) for name, v in per.items()}
        by_sku: dict[str, list[str]] = {}
        for name in sorted(per):
            by_sku.setdefault(get_template(name).gpu, []).append(name)
        if pool is None:
            pool = min(per, key=lambda n: (-gpus[n], n))
        if pool in per:
            chosen = [pool]
        elif pool in by_sku:
            chosen = by_sku[pool]
        else:
            raise SimulateError(
                f"pool {pool!r} is not in fleet {spec.name}; use a rack template "
                f"({', '.join(sorted(per))}) or a GPU SKU ({', '.join(sorted(by_sku))})")
        shapes = {(tr, g) for name in chosen for _, tr, g in per[name]}
        if len(shapes) != 1:
            raise SimulateError(
                f"pool {pool} mixes NVLink domain shapes ({', '.join(chosen)}); choose one "
                "rack template with --pool")
        (trays, gpt), = shapes
        domains = sum(d for name in chosen for d, _, _ in per[name])
        return cls(name=spec.name, domains=domains, trays_per_domain=trays, gpus_per_tray=gpt,
                   template=",".join(chosen), pool=pool, fleet_gpus=sum(gpus.values()))


def _escalate_at(config: SimConfig, fleet: FleetShape) -> int:
    if config.escalate_at is not None:
        return config.escalate_at
    template = get_template(fleet.template.split(",")[0])
    return template.max_bad_trays + 1 if template.cordon_on_bad_trays else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A config resolved on a fleet; every time in hours. A *unit* is what the job allocates:
    an NVLink domain (align=domain) or a tray (align=tray)."""

    config: SimConfig
    fleet: FleetShape
    units_job: int
    units_spare: int
    unit_trays: int
    spare_trays: int
    escalate_at: int  # 0 = never
    slots: int  # pending tray repairs tracked per unit
    job_gpus_alloc: int
    fail_rate_h: float  # fail-stop interruptions per hour on the job's allocation
    slow_rate_h: float
    causes: tuple[Cause, ...]  # the model's causes, then STRAGGLER last
    cause_p: np.ndarray  # probabilities of the fail-stop causes
    cause_scope: np.ndarray  # index into SCOPES, per cause (straggler included)
    cause_repair_h: np.ndarray
    cause_detect_h: np.ndarray
    slowdown: float
    slow_detect_h: float
    tau_h: float
    w_h: float
    u0_h: float
    start_h: float
    rack_repair_h: float
    horizon_h: float
    # Per cause (simulate.storage): the checkpoint restore, extra downtime (a lost region
    # coming back), and how long after its commit a checkpoint is not yet good for the cause.
    cause_restore_h: np.ndarray
    cause_extra_h: np.ndarray
    cause_exposed_h: np.ndarray

    @property
    def job_mtbf_h(self) -> float:
        return 1 / self.fail_rate_h if self.fail_rate_h > 0 else math.inf


def plan(config: SimConfig, fleet: FleetShape) -> Plan:
    model = failure_model(config.failure_model)
    gpt = fleet.gpus_per_tray
    if config.align == "domain":
        unit_trays = fleet.trays_per_domain
        spare_trays = config.spare_trays
        if spare_trays >= unit_trays:
            raise SimulateError(
                f"spare-trays {spare_trays} leaves no tray of a {unit_trays}-tray domain for the "
                f"job; use 0..{unit_trays - 1}")
        gpus_per_unit = (unit_trays - spare_trays) * gpt
        units_fleet = fleet.domains
        # An HGX domain is one node: nothing to escalate to.
        escalate = _escalate_at(config, fleet) if unit_trays > 1 else 0
        if escalate > unit_trays:
            raise SimulateError(f"escalate-at {escalate} exceeds the {unit_trays} trays of a "
                                f"domain; use 0 (never) or 1..{unit_trays}")
    else:
        if config.spare_trays:
            raise SimulateError("spare-trays applies to align=domain only; with align=tray "
                                "spares are whole trays: use --spare-domains")
        unit_trays, spare_trays, gpus_per_unit = 1, 0, gpt
        units_fleet = fleet.domains * fleet.trays_per_domain
        escalate = 0  # a tray-aligned job has no domain to escalate
    units_job = math.ceil(config.job_gpus / gpus_per_unit)
    what = "NVLink domains" if config.align == "domain" else "trays"
    if units_job > units_fleet:
        raise SimulateError(
            f"job of {config.job_gpus} GPUs needs {units_job} {what} of {gpus_per_unit} GPUs but "
            f"{fleet.describe()} has {units_fleet}; use --job-gpus "
            f"<= {units_fleet * gpus_per_unit}")
    free = units_fleet - units_job
    spares = free if config.spare_domains is None else config.spare_domains
    if spares > free:
        raise SimulateError(f"spare-domains {spares}: the fleet has only {free} {what} beyond "
                            f"the job's {units_job}; use 0..{free}")
    alloc = units_job * gpus_per_unit
    # The engine holds per-trial arrays over every unit and over every pre-drawn failure:
    # refuse sizes that would not fit in memory rather than swap the machine to death.
    cells = config.trials * (units_job + spares) * (unit_trays + 4)
    events = (config.trials * model.rate_per_gpu_h * config.rate_scale * alloc * config.days
              * 24 * (1 + config.straggler_ratio))  # fail-stop and fail-slow draws
    if cells > MAX_CELLS or events > MAX_CELLS:
        raise SimulateError(
            f"{config.trials} trials of this job need too much memory ({cells:.3g} unit cells, "
            f"{events:.3g} failure draws; limit {MAX_CELLS:.0e}): use fewer --trials or --days")
    slots = unit_trays if escalate == 0 else min(unit_trays, max(escalate, spare_trays + 1))
    st = config.storage
    rate = model.rate_per_gpu_h * config.rate_scale * alloc
    region_rate = st.region_loss_per_year / HOURS_PER_YEAR if st is not None else 0.0
    shares = np.asarray(model.shares, dtype=float)
    causes: tuple[Cause, ...] = (*model.causes, STRAGGLER)
    if region_rate > 0:  # a region loss is one more fail-stop cause, at its own rate
        causes = (*model.causes, REGION_LOSS, STRAGGLER)
        shares = np.append(shares * rate, region_rate) / (rate + region_rate)
    detect = [c.detect_min if config.detect_min is None else config.detect_min for c in causes]
    detect[-1] = 0.0  # a straggler's detection latency is straggler_detect_min, before it
    scope = np.array([SCOPES.index(c.scope) for c in causes], dtype=np.int8)
    if st is None:
        zero = np.zeros(len(causes))
        restore_h, extra_h, exposed_h = zero, zero, zero
        w_h = config.ckpt_cost_s / 3600
    else:
        restore_h, extra_h, exposed_h = cause_arrays(
            st, scope, np.array([c is REGION_LOSS for c in causes]))
        w_h = st.blocking_s(config.ckpt_interval_min * 60) / 3600
    return Plan(
        config=config, fleet=fleet, units_job=units_job, units_spare=spares,
        unit_trays=unit_trays, spare_trays=spare_trays, escalate_at=escalate, slots=slots,
        job_gpus_alloc=alloc, fail_rate_h=rate + region_rate,
        slow_rate_h=rate * config.straggler_ratio, causes=causes, cause_p=shares,
        cause_scope=scope,
        cause_repair_h=np.array([c.repair_h * config.repair_scale for c in causes]),
        cause_detect_h=np.array(detect) / 60,
        slowdown=config.straggler_slowdown, slow_detect_h=config.straggler_detect_min / 60,
        tau_h=config.ckpt_interval_min / 60, w_h=w_h, start_h=config.start_min / 60,
        u0_h=config.restart_min / 60, rack_repair_h=config.rack_repair_h,
        horizon_h=config.days * 24, cause_restore_h=restore_h, cause_extra_h=extra_h,
        cause_exposed_h=exposed_h,
    )
