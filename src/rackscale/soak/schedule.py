"""The soak's fault schedule, drawn from the simulator's failure model.

The model gives a fail-stop rate per GPU-hour, a split of causes (each a fault kind, a repair
time), fail-slow arrivals at `straggler_ratio` of the fail-stop rate, and rack cooling faults
at `cooling_ratio` of it (the published models have no cooling cause; a model that has one,
of kind `coolant_flow_low`, is drawn at its share like any other). A soak of minutes
on a few GPUs would see none at the published rates, so every rate is multiplied by one
factor (`rate_scale`, in the schedule) chosen so the soak expects `count` faults; the draw is
the model's Poisson process conditioned on exactly `count` arrivals. Two departures from the
model, both written into the schedule:

- Dead time: a fault arrives only after the one before has been lifted and the job has had
  `settle_s` to recover, so each incident is measured on its own. The arrivals are a Poisson
  process on the time that is left (uniform order statistics, then each one shifted by the
  dead time of those before it).
- Repair times: the model's (hours), compressed by the same factor as the rates, come to
  seconds (`model_repair_s`, recorded); each fault is held for `repair_s` instead, so it is
  present long enough to be detected (a fault lifted before anyone can see it measures
  nothing).

Every cause is mapped to what the lab can do for real (`LAB_ACTIONS`; cooling cuts the CPU
quota of every rank of the struck rank's rack by the twin's thermal model, its flow
simulated: docs/lab.md); a cause with no real
counterpart on one host (silent data corruption, a power shelf) is left out of the draw and
the others' shares renormalised; the schedule lists what was left out and why.
A fault strikes a rank of the job (idle spares do not fail, as in the simulator): the rank is
drawn here, the part it names (its GPU, NIC, leaf or rack) is resolved when the fault is
injected.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from rackscale.errors import UserError
from rackscale.simulate import STRAGGLER, Cause, FailureModel

SCHEDULE_VERSION = 1
START_ALLOW_S = 60.0  # of the soak's time, kept for the job's start-up (a loaded host: ~50 s)


class ScheduleError(UserError):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class LabAction:
    """How one cause is injected on the lab: a lab fault kind on a part of the struck rank
    (`part`: gpu, nic, leaf or rack: the rack's CDU), or a signal to the rank's process
    (`kill`, `hang`)."""

    action: str  # a lab fault kind, `flapping`, or `kill` / `hang`
    part: str  # gpu | nic | leaf | rack | rank
    severity: float | None = None
    of: str | None = None  # flapping: the kind it flaps
    duty: float | None = None
    period_s: float | None = None
    why: str = ""


# Published cause (or fault kind) -> what the lab does. The "network switch/cable" cause is
# split three ways (a slow cable, a flapping dead NIC, a degraded leaf): the model does not
# split it, the lab can do all three.
NETWORK = (
    LabAction(action="bad_cable", part="nic", severity=0.1, why="a slow cable"),
    LabAction(action="flapping", part="nic", of="nic_dead", duty=0.5, period_s=6.0,
              why="a cable that comes and goes"),
    LabAction(action="leaf_degraded", part="leaf", severity=0.1, why="a degraded leaf"),
)
LAB_ACTIONS: dict[str, tuple[LabAction, ...]] = {
    "gpu_dead": (LabAction(action="gpu_dead", part="gpu",
                           why="the GPU falls off the bus: its cgroup admits no process"),),
    "hbm_degraded": (LabAction(action="slow_gpu", part="gpu", severity=0.3,
                               why="the lab cannot slow one rank's memory; a slow GPU is "
                               "the nearest real counterpart"),),
    "software": (LabAction(action="kill", part="rank", why="the rank's process crashes "
                           "(kill -9)"),),
    "host": (LabAction(action="kill", part="rank", why="the host goes down with its rank "
                       "(kill -9)"),),
    "bad_cable": NETWORK,
    "nic_dead": (LabAction(action="nic_dead", part="nic", why="the NIC carries nothing"),),
    "slow_gpu": (LabAction(action="slow_gpu", part="gpu", severity=0.3,
                           why="a fail-slow GPU: its cgroup's CPU share cut to 30%"),),
    # Half the needed flow: the twin's curve gives ~53% clock, slow enough for the straggler
    # detector, not so slow that the rack's ranks look dead.
    "coolant_flow_low": (LabAction(action="coolant_flow_low", part="rack", severity=0.5,
                                   why="the rack's CDU at 50% of needed flow (simulated): "
                                   "every rank of the rack throttled by the twin's thermal "
                                   "model"),),
}
# Rack cooling, the soak's own cause (as STRAGGLER is the simulator's): no published model
# counts it. Its repair time is an assumption (a pump or valve fixed within a shift).
COOLING = Cause(name="coolant flow low (CDU)", count=0, kind="coolant_flow_low",
                scope="domain", repair_h=4, detect_min=0)
# Causes named so their lab action differs from their kind's.
BY_CAUSE = {"NCCL watchdog timeouts": (LabAction(
    action="hang", part="rank", why="a collective that never returns: the rank is stopped "
    "(SIGSTOP)"),)}
NOT_ON_LAB = {
    "sdc": "wrong GEMM results need a GPU that corrupts its arithmetic",
    "power_shelf_down": "the lab has no power shelves",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduledFault:
    index: int
    at_s: float  # seconds after the job is ready (its first 10 steps done)
    repair_s: float  # held this long, then lifted
    model_repair_s: float  # the model's repair time compressed by rate_scale (module doc)
    cause: str  # the model's published label
    model_kind: str  # the cause's fault kind in the model
    model_repair_h: float
    rank: int  # the job's rank it strikes
    lab: LabAction


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    failure_model: str
    source: str
    seed: int
    count: int
    gpus: int
    duration_s: float
    warmup_s: float
    settle_s: float
    repair_floor_s: float
    rate_scale: float
    expected_unscaled: float
    faults: tuple[ScheduledFault, ...]
    left_out: dict[str, str] = field(default_factory=dict)
    kinds: tuple[str, ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["faults"] = [asdict(f) for f in self.faults]
        return {"version": SCHEDULE_VERSION, "basis": "drawn from the simulator's failure "
                "model (rates scaled, see rate_scale); injected for real on the lab", **d}


def from_dict(d: dict[str, Any]) -> Schedule:
    """A schedule as `to_dict` wrote it (`schedule.json`), to run it again."""
    if not isinstance(d, dict) or d.get("version") != SCHEDULE_VERSION:
        raise ScheduleError(f"not a soak schedule of version {SCHEDULE_VERSION} (the "
                            "schedule.json a soak wrote)")
    try:
        faults = tuple(ScheduledFault(**(f | {"lab": LabAction(**f["lab"])}))
                       for f in d["faults"])
        fields = {k: v for k, v in d.items() if k not in ("version", "basis", "faults")}
        kinds = fields.pop("kinds", None)
        return Schedule(**fields, faults=faults,
                        kinds=tuple(kinds) if kinds is not None else None)
    except (TypeError, KeyError) as err:
        raise ScheduleError(f"a soak schedule with a missing or unknown field ({err})"
                            ) from None


def _actions(c: Cause) -> tuple[LabAction, ...]:
    return BY_CAUSE.get(c.name) or LAB_ACTIONS.get(c.kind, ())


def _pool(model: FailureModel, straggler_ratio: float, kinds: tuple[str, ...] | None,
          cooling_ratio: float = 0.0) -> tuple[list[tuple[Cause, float]], dict[str, str]]:
    """(cause, weight) of every cause the lab can inject, and the causes left out."""
    total = sum(c.count for c in model.causes)
    pool = [(c, c.count / total) for c in model.causes]
    pool.append((STRAGGLER, straggler_ratio))  # fail-slow, relative to the fail-stop rate
    pool.append((COOLING, cooling_ratio))  # likewise; weight 0 leaves the draw as it was
    left: dict[str, str] = {}
    out = []
    for c, w in pool:
        acts = _actions(c)
        if not acts:
            left[c.name] = NOT_ON_LAB.get(c.kind, "no real counterpart on the lab")
        elif kinds is not None and not {c.kind, *(a.action for a in acts)} & set(kinds):
            left[c.name] = "not among --kinds"
        elif w > 0:
            out.append((c, w))
    if not out:
        raise ScheduleError(f"--kinds {','.join(kinds or ())}: no cause of failure model "
                            f"{model.name} maps to them; use fault kinds such as gpu_dead, "
                            "slow_gpu, bad_cable, nic_dead, software, host")
    return out, left


def draw(model: FailureModel, *, count: int, gpus: int, duration_s: float, seed: int,
         warmup_s: float = 15.0, settle_s: float = 25.0, repair_s: float = 25.0,
         straggler_ratio: float = 0.1, kinds: tuple[str, ...] | None = None,
         cooling_ratio: float = 0.0) -> Schedule:
    """`count` faults over a soak of `duration_s` on a job of `gpus` ranks (module doc).
    Fault times count from the job's ready moment (its first steps done, `at_s`); the first
    `START_ALLOW_S` of the soak are kept for its start-up, then `warmup_s` of clean run."""
    if count < 0:
        raise ScheduleError(f"--fault-count {count}: give 0 or more")
    if cooling_ratio < 0:
        raise ScheduleError(f"--cooling-ratio {cooling_ratio}: give 0 or more")
    pool, left = _pool(model, straggler_ratio, kinds, cooling_ratio)
    window = duration_s - START_ALLOW_S - warmup_s
    dead = repair_s + settle_s  # each fault's own time, during which no other arrives
    free = window - count * dead
    if free < 0:
        need = START_ALLOW_S + warmup_s + count * dead
        raise ScheduleError(f"{count} faults need at least {need:.0f} s (start-up and "
                            f"warm-up {START_ALLOW_S + warmup_s:.0f} s, then {dead:.0f} s "
                            f"each: held {repair_s:.0f} s, {settle_s:.0f} s to recover); "
                            f"give a --duration-min of at least {need / 60:.1f} min or fewer "
                            "faults")
    rate_h = model.rate_per_gpu_h * (1 + straggler_ratio + cooling_ratio) * gpus
    expected = rate_h * duration_s / 3600
    scale = count / expected if expected > 0 else 0.0
    rng = random.Random(seed)
    arrivals = sorted(rng.uniform(0, free) for _ in range(count))
    causes, weights = [c for c, _ in pool], [w for _, w in pool]
    faults = []
    for i, a in enumerate(arrivals):
        c = rng.choices(causes, weights)[0]
        act = rng.choice(_actions(c))
        compressed = c.repair_h * 3600 / scale if scale else repair_s
        faults.append(ScheduledFault(
            index=i, at_s=round(warmup_s + a + i * dead, 3),
            repair_s=repair_s, model_repair_s=round(compressed, 3), cause=c.name,
            model_kind=c.kind, model_repair_h=c.repair_h, rank=rng.randrange(gpus), lab=act))
    return Schedule(failure_model=model.name, source=model.source, seed=seed, count=count,
                    gpus=gpus, duration_s=duration_s, warmup_s=warmup_s, settle_s=settle_s,
                    repair_floor_s=repair_s, rate_scale=round(scale, 3),
                    expected_unscaled=expected, faults=tuple(faults), left_out=left,
                    kinds=kinds)
