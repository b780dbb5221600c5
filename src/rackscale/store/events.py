"""The event contract: one typed, versioned payload model per event kind.

Every event the store appends is checked here first: its kind must be registered (an unknown
kind raises `UnknownEventKind`, whose message lists the valid kinds) and its payload must fit
the kind's model (else `InvalidPayload`, naming the kind, the field and what is wrong). The
store is the lowest room that writes, so every room can import these models, and readers parse
a stored payload back through them (`Event.read(Model)`, or `parse(kind, payload)`).

Versions: a payload carries its model's version in the key `v`; a payload without `v` is
version 1 (every event written before versions existed). A model's name ends in its version
(`CertifyRunV1`). A kind's next version is a new class (`...V2`) with `VERSION = 2` registered
under the same kind; readers get the model of the version the
payload was written with.

Adding a kind is one class here:

    @event_kind("recover.incident")
    class RecoverIncidentV1(Payload):
        \"\"\"A job's incident: what failed and what the supervisor did.\"\"\"
        job: str
        action: str

Fields a model names are checked; `extra="allow"` models (the default) keep further keys a
writer adds (context such as `backend`), `Closed` models refuse them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rackscale.errors import UserError
from rackscale.incidents import RECOVERY_INCIDENT
from rackscale.registry import Registry, UnknownName
from rackscale.simresult import Goodput, MeanCI, SimRunRecord, SimulatedJob, YoungDaly

VERSION_KEY = "v"


class Kind(StrEnum):
    """Every event kind, by name: code names a kind through this enum (a typo is an
    AttributeError at import, not a query that silently matches nothing). Each member has its
    payload model below; `tests/store/test_events.py` holds the two lists equal."""

    FLEET_LOADED = "fleet.loaded"
    RACK_ADDED = "fleet.rack_added"
    RACK_REMOVED = "fleet.rack_removed"
    TWIN_PLANT = "twin.plant"
    CERTIFY_RUN = "certify.run"
    CERTIFY_FINDING = "certify.finding"
    CERTIFY_RESULT = "certify.result"
    LIFECYCLE_TRANSITION = "lifecycle.transition"
    LIFECYCLE_INTERLOCK = "lifecycle.interlock"
    LIFECYCLE_SLURM = "lifecycle.slurm"
    LIFECYCLE_NOTED = "lifecycle.noted"
    TELEMETRY_COUNTERS = "telemetry.counters"
    SIMULATE_RUN = "simulate.run"
    SIMULATE_SWEEP = "simulate.sweep"
    SIMULATE_STORAGE_WHATIF = "simulate.storage_whatif"
    RECOVERY_INCIDENT = RECOVERY_INCIDENT
    RECOVERY_JOB = "recovery.job"
    RECOVERY_SOAK = "recovery.soak"


# A registered event kind as the store's methods take it: the enum for rackscale's own kinds,
# a plain name for a plugin's (which cannot be an enum member). Both are checked against the
# registry when used, so an unknown name is refused with the valid ones either way.
KindName = Kind | str


class UnknownEventKind(UnknownName):
    """An event kind no payload model is registered for."""


class InvalidPayload(UserError, ValueError):
    """A payload that does not fit its kind's model (nothing was written)."""


class Payload(BaseModel):
    """Base of every payload model; `KIND` is set by `event_kind`, `VERSION` by the model."""

    model_config = ConfigDict(extra="allow", frozen=True)
    KIND: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1

    def dump(self) -> dict[str, Any]:
        """The payload as stored: plain JSON values, fields left unset omitted, `v` when the
        version is past 1."""
        out = self.model_dump(mode="json", exclude_unset=True, by_alias=True)
        if self.VERSION != 1:
            out[VERSION_KEY] = self.VERSION
        return out


class Closed(Payload):
    """A payload whose fields are all named: an unnamed key is an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class EventKind:
    """The payload models of one kind, by version."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.versions: dict[int, type[Payload]] = {}

    @property
    def latest(self) -> type[Payload]:
        return self.versions[max(self.versions)]

    def model(self, version: int) -> type[Payload]:
        try:
            return self.versions[version]
        except KeyError:
            raise InvalidPayload(
                f"event {self.name}: payload version {version!r} is unknown; valid versions: "
                f"{', '.join(map(str, sorted(self.versions)))}") from None

    def __repr__(self) -> str:
        return f"EventKind({self.name!r}, versions={sorted(self.versions)})"


EVENT_KINDS: Registry[EventKind] = Registry("event kind", error=UnknownEventKind,
                                             sort_names=True)
P = TypeVar("P", bound=type[Payload])


def event_kind(name: str) -> Callable[[P], P]:
    """Class decorator: register the payload model of event kind `name` at its `version`."""
    def deco(cls: P) -> P:
        old = EVENT_KINDS.get(name)
        if old is not None and cls.VERSION in old.versions:
            raise ValueError(f"event kind {name!r} version {cls.VERSION} is registered twice")
        # A new entry rather than a changed one, so `EVENT_KINDS.scoped()` undoes a version
        # registered inside it too.
        entry = EventKind(name)
        entry.versions = {**(old.versions if old else {}), cls.VERSION: cls}
        cls.KIND = name
        EVENT_KINDS.add(name, entry, replace=True)
        return cls
    return deco


def _message(kind: str, version: int, err: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}" for e in err.errors())
    return (f"event {kind} (payload version {version}) does not fit its contract: {problems}. "
            "See docs/contracts.md for the fields of each event kind.")


def parse(kind: str, payload: Mapping[str, Any] | None) -> Payload:
    """The payload as its kind's model (of the version it was written with)."""
    entry = EVENT_KINDS[kind]
    data = dict(payload or {})
    version = data.pop(VERSION_KEY, 1)
    model = entry.model(version)
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise InvalidPayload(_message(kind, version, err)) from None


M = TypeVar("M", bound=Payload)


def carried_payload(carrier: Mapping[str, Any], model: type[M]) -> M:
    """The payload a document carries for one event (a report section's `payload`, an event
    as `Event.as_dict` wrote it), read through `model`: a room reads a carried payload as its
    model, never as a dict. InvalidPayload when it does not fit, or is of another version."""
    data = parse(model.KIND, carrier.get("payload"))
    if not isinstance(data, model):
        raise InvalidPayload(f"the {model.KIND} payload carried at seq {carrier.get('seq')} is "
                             f"{type(data).__name__}; its reader expected {model.__name__}")
    return data


def validated(kind: str, payload: Mapping[str, Any] | Payload | None) -> dict[str, Any]:
    """What the store writes for `payload`: a dict is checked against the kind's model and
    written as given; a model instance (of this kind) is dumped."""
    if isinstance(payload, Payload):
        if kind != payload.KIND:
            raise InvalidPayload(f"event {kind}: got a {payload.KIND or 'unregistered'} "
                                 f"payload model ({type(payload).__name__})")
        return payload.dump()
    data = dict(payload or {})
    parse(kind, data)
    return data


# ---------------------------------------------------------------------------------- fleet
@event_kind("fleet.loaded")
class FleetLoadedV1(Closed):
    """A fleet spec was loaded into the inventory (component_id: the fleet's name)."""

    fleet: str
    changed: bool
    racks_added: list[str] = []
    racks_removed: list[str] = []
    components_added: int = 0
    components_removed: int = 0
    components_changed: int = 0
    spec_changed: bool = False
    total_components: int = 0


@event_kind("fleet.rack_added")
class RackAddedV1(Closed):
    """A rack entered the inventory (component_id: the rack)."""

    template: str | None = None


@event_kind("fleet.rack_removed")
class RackRemovedV1(Closed):
    """A rack left the inventory (component_id: the rack)."""


# ---------------------------------------------------------------------------------- twin
class PlantFault(BaseModel):
    """One fault of the twin's plant, as the faults file gave it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    target: str
    kind: str
    severity: float | None = None


@event_kind("twin.plant")
class TwinPlantV1(Closed):
    """The digital twin's plant now carries these faults (component_id: the fleet's name).
    Written whenever a faults file is applied to the twin (`certify run` on the twin, with or
    without `--faults`; `lifecycle run --faults`), so every room that reads the twin's CDUs,
    power shelves or GPUs reads the same plant: the newest of these events."""

    faults_file: str | None = None
    faults: list[PlantFault] = []
    seed: int = 0
    simulated: Literal[True] = True


# ---------------------------------------------------------------------------------- certify
Backend = Literal["twin", "real"]
Stage = int | str  # 1 gpu, 2 tray, 3 domain, 4 multi-rack, or the stage's name


class OfCertifyRun(BaseModel):
    """The certification run an event comes from, and what it ran on."""

    run_id: str
    backend: Backend


class UntestedPart(BaseModel):
    """A part the run could not measure: the stage that tests it ran without it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    part: str
    stage: Stage
    because: list[str]  # the findings that left it out


@event_kind("certify.run")
class CertifyRunV1(Payload, OfCertifyRun):
    """One certification run (component_id: the fleet's name). `findings` is a count."""

    seed: int | None = None
    faults_file: str | None = None
    stages: list[Stage] = []
    collective_tests: int = 0
    collective_runs: int | None = None
    allpairs_tests: int = 0
    tests_vs_allpairs: float | None = None
    campaign_s: float = 0.0
    campaign_batches: int | None = None
    repeats: int | None = None
    gpus_total: int = 0
    gpus_clear: int | None = None
    gpus_healthy: int | None = None  # the old name of gpus_clear
    gpus_passed: int | None = None
    findings: int = 0
    warns: int | None = None
    wall_s: float | None = None
    fabric: list[dict[str, Any]] = []
    scope: str | None = None
    simulated: bool | None = None
    measured: bool | None = None
    # Parts never measured because an earlier failure left them out (certify.ladder): each
    # {part, stage, because: [finding components]}. None: written before this was kept.
    untested: list[UntestedPart] | None = None


FindingVerdict = Literal["fail", "warn", "pass"]


@event_kind("certify.finding")
class CertifyFindingV1(Payload, OfCertifyRun):
    """A finding of a run (component_id: the faulty component, or the smallest scope holding
    an unlocalized group)."""

    component: str
    kind: str  # a fault kind, `flapping`, `probe_error` or `unlocalized`
    stage: Stage
    evidence: dict[str, Any] = {}
    confidence: float = Field(ge=0, le=1)
    verdict: FindingVerdict = "fail"


ResultVerdict = Literal["pass", "fail", "not_run"]


@event_kind("certify.result")
class CertifyResultV1(Payload):
    """Production evidence of one tray/node or rack from a run (component_id: that part)."""

    verdict: ResultVerdict
    run_id: str | None = None
    backend: Backend | None = None
    stages_passed: list[Stage] = []
    findings: list[str] | None = None
    blocked_by: list[str] | None = None
    trays_failed: int | None = None
    trays: int | None = None


# ---------------------------------------------------------------------------------- lifecycle
@event_kind("lifecycle.transition")
class LifecycleTransitionV1(Payload):
    """A rack or tray moved (`from` None: enrolled). The latest `to` is its state."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    from_: str | None = Field(alias="from")
    to: str
    evidence_seq: int | None = None  # the certify.result that opened certified/production
    finding_seq: int | None = None  # the certify.finding that sent it to triage
    backend: Backend | None = None  # the driver behind the move
    fixed: list[str] | None = None  # a repair's parts named fixed (None: the whole part)


@event_kind("lifecycle.interlock")
class LifecycleInterlockV1(Payload):
    """An interlock acted on a rack, tray or CDU (power cap, drain, power off, isolate,
    cleared) or holds a rack (`action: hold`, once per hold)."""

    rule: str
    action: str
    at: float | None = None  # the controller's clock
    tier: int | None = None
    trays: list[str] | None = None
    flow_lpm: float | None = None
    required_lpm: float | None = None


@event_kind("lifecycle.slurm")
class LifecycleSlurmV1(Closed):
    """The controller drained or resumed a tray's Slurm node."""

    action: Literal["drain", "resume"]
    node: str


@event_kind("lifecycle.noted")
class LifecycleNotedV1(Closed):
    """Triage read a finding and moved nothing; the event's reason says why."""

    finding_seq: int
    action: Literal["none"] = "none"


# ---------------------------------------------------------------------------------- telemetry
@event_kind("telemetry.counters")
class TelemetryCountersV1(Closed):
    """The error and throttle counters a GPU telemetry source last reported for one tray or
    node (component_id: that tray): `counters` maps the GPU's index in the tray ("0".."7")
    to DCGM field -> value. Written when they differ from the tray's previous such event, so
    a rise (NVLink CRC errors, thermal or power throttling) is measured against it and a
    repeated scrape writes nothing. Findings from telemetry are `certify.finding` events of
    stage `telemetry`."""

    source: str
    host: str
    counters: dict[str, dict[str, float]]
    measured: Literal[True] = True


# ---------------------------------------------------------------------------------- simulate
@event_kind("simulate.run")
class SimulateRunV1(Payload, SimRunRecord):
    """A simulated job on a fleet (component_id: the fleet's name); hours are per trial. Its
    fields are `rackscale.simresult.SimRunRecord`'s; the simulator writes its whole
    `SimResult`, which reads back from the payload with `SimResult.model_validate`."""


class SweepPoint(YoungDaly):
    """One value of a sweep and the run's figures at it."""

    model_config = ConfigDict(extra="allow", frozen=True)
    value: float
    ettr: MeanCI
    goodput: Goodput | None = None
    job_mttf_h: float | None = None


@event_kind("simulate.sweep")
class SimulateSweepV1(Payload, SimulatedJob, YoungDaly):
    """One policy swept over values (component_id: the fleet's name)."""

    param: str
    field: str
    values: list[float]
    points: list[SweepPoint]
    optimum: dict[str, Any]


@event_kind("simulate.storage_whatif")
class SimulateStorageWhatifV1(Payload, SimulatedJob):
    """A storage what-if (component_id: the fleet's name): ETTR and lost GPU-hours per
    storage setup (local cache, replication) over checkpoint intervals."""

    failure_model: str
    setups: dict[str, Any]
    storage: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------- recovery
@event_kind(RECOVERY_INCIDENT)
class RecoveryIncidentV1(Closed):
    """One fault of a supervised job, from detection to the first completed step after the
    restart (component_id: the excluded GPU; the rack, with fault_kind coolant_flow_low, when
    a hot rack's slots left the job as one). The recovery supervisor writes it and the
    report, the simulator and the server read it: this model is the one contract of them all.

    Every time is measured on the run (wall clock of the supervisor's host, `host`), never
    simulated; in seconds: `detect_s` from the rank's last heartbeat (fail-stop, hang) or its
    first under-threshold step (straggler) to the decision; `stop_s` to stop every old rank;
    `localize_s` the targeted probe of a straggler's GPU and NIC after that (0 when none
    ran: `component` and `fault_kind` are then the symptom's; else the probe's, its figures
    in `evidence.localize`, and `slot` the GPU slot the rank left when `component` is
    another part, its NIC); `restart_s` decision to every new rank
    launched; `start_s` launch to every new process running (interpreter and imports);
    `restore_s` the slowest rank's checkpoint load (as the rank timed it); `first_step_s`
    launch to every rank's first step; `downtime_s` decision to that first step.
    `work_lost_steps`: steps done past the checkpoint the job resumed from; `step_s` the job's
    median step time before the fault (steps of the ranks that did not fail), so the lost work
    is `work_lost_steps` x `step_s` seconds. The supervisor fills the later phases in as they
    happen (`model_copy(update=...)`: the model is frozen, like every payload).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    job: str
    attempt: int
    # drain: no symptom of a rank; the lifecycle's coolant response drained the rack
    symptom: Literal["fail_stop", "hang", "straggler", "drain"]
    rank: int
    component: str
    fault_kind: str
    slot: str | None = None
    spare: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict)
    detected_at: float | None = None
    detect_s: float | None = None
    detect_steps: int | None = None
    localize_s: float | None = None
    stop_s: float | None = None
    restart_s: float | None = None
    start_s: float | None = None
    restore_s: float | None = None
    first_step_s: float | None = None
    downtime_s: float | None = None
    ckpt_id: str | None = None
    ckpt_step: int = 0
    work_lost_steps: int = 0
    step_s: float | None = None
    host: str | None = None
    outcome: Literal["resumed", "no_spare", "supervisor_gone", "failed_again",
                     "unlocalized"] = "resumed"
    measured: Literal["measured"] = "measured"


@event_kind("recovery.job")
class RecoveryJobV1(Closed):
    """A supervised job started, resumed, finished or failed, or took back slots excluded
    earlier once their repair was certified (`rejoined`: `slots`, `message` the evidence)
    (component_id: job/<id>); `message` says why a job failed."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    job: str
    status: Literal["started", "resumed", "finished", "failed", "rejoined"]
    gpus: int
    attempt: int
    spares_left: int | None = None
    excluded: list[str] = []
    ckpt_id: str | None = None
    message: str = ""
    slots: list[str] = []


@event_kind("recovery.soak")
class RecoverySoakV1(Closed):
    """A soak (`rackscale job soak`, component_id: job/<id>): a supervised job on the lab under
    a fault schedule drawn from the simulator's failure model. Every figure is measured on the
    run (`host`, its `load_avg` at the start and the end): `ettr` {value, lo, hi, method} and
    `goodput`, `badput_s` by cause (initial_start, detection, running_degraded, stop,
    localization, restart, restore, lost_work, other), and per fault (`faults`) its time to
    detect, the part named against the part injected, and its badput. `schedule` names the
    schedule file, its seed, failure model and rate scale. `predicted` (optional) is the
    simulator's ETTR for the same soak, simulated: {simulated: true, ettr, ettr_ci95, ettr_lo,
    ettr_hi, inputs, badput_s, ...}, or {simulated: true, ettr: null, why}."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    job: str
    host: str
    lab: str
    schedule: dict[str, Any]
    window_s: float
    clean_step_s: float
    ettr: dict[str, Any]
    goodput: dict[str, Any]
    badput_s: dict[str, float]
    faults: list[dict[str, Any]] = []
    load_avg: dict[str, Any] = {}
    # the lifecycle beside the job: its racks' state changes (a drain, a power-off, the return
    # to production) and what the plant's readings are (simulated on the lab)
    lifecycle: dict[str, Any] = {}
    measured: Literal[True] = True
    predicted: dict[str, Any] | None = None


def kinds() -> list[str]:
    """Every registered event kind, sorted."""
    return EVENT_KINDS.names()
