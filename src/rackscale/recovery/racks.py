"""A hot rack, as the supervisor sees it: which of the job's slots leave together, and which
spares take their ranks.

Coolant flow is per rack (its CDU), so every GPU of a rack with a cooling condition throttles
at once (the twin's and the lab's thermal model). Excluding only the slot the straggler
detector named would put the next rank of the same rack in its place, and the one after that
on the next attempt: one restart per GPU of the rack. Excluding the rack's slots as one, and
taking their spares from other racks, spends one restart. Pure: no I/O, no state.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rackscale.errors import UserError


class SparesExhausted(UserError):
    def __init__(self, message: str, move: RackMove | None = None) -> None:
        super().__init__(message)
        # for hot racks: the slots that leave all the same, with no spare taken
        self.move = move


class UnknownSlotRack(UserError):
    pass


# The racks with a cooling condition now -> what is known of it (the evidence an incident
# carries: the CDU, the flow, and whether that flow is measured or simulated).
CoolingConditions = Callable[[], Mapping[str, Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class HotRacks:
    """Where a supervisor learns of hot racks: `rack_of` every slot of the job and its spares
    (from the fleet's topology), and `conditions`, asked when a straggler is acted on (a
    cooling condition comes and goes; the one present then is the one that counts)."""

    rack_of: Mapping[str, str]
    conditions: CoolingConditions


@dataclass(frozen=True, slots=True)
class RackMove:
    """What to do about the hot racks: `exclude` (the job's slots in them, in rank order),
    `moves` (each excluded slot -> the spare that takes its rank) and `spares_left` (the
    spares not taken, in their order; those in a hot rack stay, for after its repair)."""

    racks: tuple[str, ...]  # the hot racks the job uses, sorted
    exclude: tuple[str, ...]
    moves: dict[str, str]
    spares_left: tuple[str, ...]


def hot_rack_move(assignment: Sequence[str], spares: Sequence[str],
                  rack_of: Mapping[str, str], hot: Collection[str]) -> RackMove:
    """The slots to exclude as one (every slot of a hot rack that the job uses) and the
    spares from other racks that take their ranks. `assignment[rank]` is the rank's slot;
    `rack_of` must name the rack of every slot and spare (a slot of unknown rack could sit in
    the hot one). Nothing to do (no hot rack in the job) is an empty move. Raises
    SparesExhausted when fewer spares lie outside the hot racks than slots must leave."""
    missing = [s for s in (*assignment, *spares) if s not in rack_of]
    if missing:
        raise UnknownSlotRack(f"no rack known for slot(s) {', '.join(missing[:4])}"
                              + (" ..." if len(missing) > 4 else ""))
    hot = set(hot)
    exclude = tuple(s for s in assignment if rack_of[s] in hot)
    cool = [s for s in spares if rack_of[s] not in hot]
    racks = tuple(sorted({rack_of[s] for s in exclude}))
    if len(cool) < len(exclude):
        raise SparesExhausted(
            f"rack(s) {', '.join(racks)} are hot: {len(exclude)} slots of the job must leave "
            f"together and only {len(cool)} spares lie in other racks; add spares outside the "
            "hot rack(s) or restore their cooling",
            RackMove(racks=racks, exclude=exclude, moves={}, spares_left=tuple(spares)))
    moves = dict(zip(exclude, cool, strict=False))
    taken = set(moves.values())
    return RackMove(racks=racks, exclude=exclude, moves=moves,
                    spares_left=tuple(s for s in spares if s not in taken))
