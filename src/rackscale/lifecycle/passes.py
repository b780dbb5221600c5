"""What one reconcile pass did (`PassReport`), and the per-rack transaction it writes in."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from rackscale.store import Store


@dataclass(slots=True)
class PassReport:
    commands: int = 0
    transitions: int = 0
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
        return {"commands": self.commands, "transitions": self.transitions,
                "interlocks": self.interlocks, "slurm": self.slurm, "waiting": self.waiting,
                "errors": self.errors}


class Tx:
    """Opens the rack's transaction on first write, so a quiet rack costs no transaction."""

    def __init__(self, store: Store, stack: ExitStack) -> None:
        self.store = store
        self.stack = stack
        self.s: Session | None = None

    def __call__(self) -> Session:
        if self.s is None:
            self.s = self.stack.enter_context(self.store.session())
        return self.s
