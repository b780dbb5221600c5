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
    # What is timed and not yet due: component -> (when, clock seconds; what comes then). A
    # pass that changes nothing is idle only when this is empty (`Controller.run`).
    due: dict[str, tuple[float, str]] = field(default_factory=dict)
    # A driver that fails for one rack, or a row an operator moved under the pass, must not
    # stop the fleet: the rack's writes roll back, the error is reported here and the rack is
    # retried next pass.
    errors: dict[str, str] = field(default_factory=dict)
    # Entries (events, moves, fault fields) the pass queued: a fault field is written without
    # an event, so "the log did not move" alone does not say that the rows did not.
    writes: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.commands or self.transitions or self.interlocks or self.slurm)

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "commands": self.commands,
                "transitions": self.transitions,
                "interlocks": self.interlocks, "slurm": self.slurm, "waiting": self.waiting,
                "due": {cid: {"at": round(at, 3), "what": what}
                        for cid, (at, what) in sorted(self.due.items())},
                "errors": self.errors}

    def next_due(self) -> tuple[str, float, str] | None:
        """The earliest timed step still to come: (component, when, what), or None."""
        if not self.due:
            return None
        cid, (at, what) = min(self.due.items(), key=lambda kv: (kv[1][0], kv[0]))
        return cid, at, what


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """How `Controller.run` ended: after `passes` passes, idle (nothing changed and nothing
    timed to come), or with `pending` still to come when it had to stop (its pass limit, no
    way to wait, or `max_wait_s` spent: then `waited_out`)."""

    passes: int
    pending: dict[str, tuple[float, str]]
    waited_out: bool = False

    @property
    def idle(self) -> bool:
        return not self.pending


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
