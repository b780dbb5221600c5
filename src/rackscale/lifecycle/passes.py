"""One reconcile pass: what it read (`Pass`, `RackPass`, `Row`), what it did (`PassReport`),
and the batch its writes go into (`Writes`, committed once at the end of the pass)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rackscale.lifecycle.drivers import CduTelemetry
from rackscale.lifecycle.repository import Row
from rackscale.lifecycle.writes import Writes


@dataclass(slots=True)
class PassReport:
    commands: int = 0
    transitions: int = 0
    seconds: float = 0.0  # wall time of the pass, measured
    interlocks: int = 0
    slurm: int = 0
    waiting: dict[str, str] = field(default_factory=dict)
    # A driver that fails for one rack, or a row an operator moved under the pass, must not
    # stop the fleet: the rack's writes roll back, the error is reported here and the rack is
    # retried next pass.
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.commands or self.transitions or self.interlocks or self.slurm)

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "commands": self.commands,
                "transitions": self.transitions,
                "interlocks": self.interlocks, "slurm": self.slurm, "waiting": self.waiting,
                "errors": self.errors}


@dataclass(slots=True)
class Pass:
    """One reconcile pass: what it read once for the whole fleet, and the tallies it keeps
    current as it moves rows. It lives for one pass, so nothing of it leaks into the next."""

    now: float
    rows: dict[str, Row]
    obs: dict[str, bool]  # power state of every target, updated as commands go out
    caps: dict[str, float]
    readings: Mapping[str, CduTelemetry]
    w: Writes
    load: dict[str, float] = field(default_factory=dict)  # region -> kW reserved
    rep: PassReport = field(default_factory=PassReport)
    bad: dict[str, int] = field(default_factory=dict)  # rack -> trays in a bad state
    held: set[str] = field(default_factory=set)  # trays held off by a leak
    repair: set[str] = field(default_factory=set)  # trays in repair/rma: kept off


@dataclass(slots=True)
class RackPass:
    """One rack inside a pass: its row, its parts, its CDU reading and its transaction."""

    ps: Pass
    rid: str
    row: Row
    shelves: list[str]
    trays: list[str]
    reading: CduTelemetry
