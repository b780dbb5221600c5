"""The simulation the report rests on, read as its typed event (`SimulateRunV1`), and the one
figure the ledger takes from it: the share of wall time the job makes progress.

A `simulate.run` payload is read through the store's contract once; every reader (the ledger's
goodput step and warnings, the job shapes, the page, the disclosure) then uses its fields. A
payload that does not fit the contract (an event written before the store checked payloads)
is not guessed at: the report says it is not applied and names the field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rackscale.store import Event, InvalidPayload, SimulateRunV1, carried_payload

KIND = "simulate.run"


def simulation_of(ev: Event) -> SimulateRunV1 | InvalidPayload:
    """A simulate.run event's payload as its model, or the contract's error (naming the
    field) when it does not fit."""
    try:
        return ev.read(SimulateRunV1)
    except InvalidPayload as err:
        return err


def read_simulation(section: Mapping[str, Any]) -> SimulateRunV1 | InvalidPayload:
    """report.json's simulation section's payload, as its model (as `simulation_of`)."""
    try:
        return carried_payload(section, SimulateRunV1)
    except InvalidPayload as err:
        return err


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _interval(mean: float, ci: float | list[float] | None) -> tuple[float, float] | None:
    """A 95% CI given as a half-width (the simulator's) or as [low, high]."""
    if isinstance(ci, float | int):
        return (mean - float(ci), mean + float(ci)) if _finite(ci) else None
    if isinstance(ci, list) and len(ci) == 2 and all(map(_finite, ci)):
        return float(ci[0]), float(ci[1])
    return None


def failure_goodput(run: SimulateRunV1) -> tuple[float, tuple[float, float] | None, str] | None:
    """(fraction, its 95% CI, which figure) of a run: the share of wall time the job makes
    progress despite failures. ETTR is that figure (Meta's definition); when its mean is not in
    [0, 1], scheduling x runtime goodput. Program goodput (MFU) is a property of the model
    code, not a loss to failures, so it is never applied to the ledger. None: neither fits."""
    mean = run.ettr.mean
    if _finite(mean) and 0.0 <= mean <= 1.0:
        return mean, _interval(mean, run.ettr.ci95), "ettr"
    sched, runtime = run.goodput.scheduling, run.goodput.runtime
    if sched is None or runtime is None or not (_finite(sched) and _finite(runtime)):
        return None
    frac = sched * runtime
    return (frac, None, "goodput.scheduling x goodput.runtime") if 0.0 <= frac <= 1.0 else None
