"""Provenance: whether a figure was measured on real hardware or simulated on the digital twin.

Every number in output says which (docs/architecture.md); this enum is the one place that maps
the backend that answered (`twin`, `real`) to the words reports use (`simulated`, `measured`).
It is a `StrEnum`, so its members are the very strings stored in events and JSON. Like
`rackscale.errors` it imports nothing, so every room may use it.
"""

from __future__ import annotations

from enum import StrEnum

MEASURED, SIMULATED = "measured", "simulated"


class Provenance(StrEnum):
    REAL = "real"
    """Real hardware answered: the figure is measured."""
    TWIN = "twin"
    """The digital twin answered: the figure is simulated."""

    @property
    def basis(self) -> str:
        """`measured` or `simulated`: the word (and evidence key) a report uses."""
        return MEASURED if self is Provenance.REAL else SIMULATED

    @property
    def described(self) -> str:
        return MEASURED if self is Provenance.REAL else "simulated on the digital twin"

    @classmethod
    def parse(cls, value: object) -> Provenance | None:
        """The member a stored value names (`"twin"`, `"real"`), or None for anything else."""
        try:
            return cls(value) if isinstance(value, str) else None
        except ValueError:
            return None

    @classmethod
    def of_basis(cls, basis: object) -> Provenance:
        """The provenance of a figure whose basis is `measured` (else: simulated, the twin)."""
        return cls.REAL if basis == MEASURED else cls.TWIN


# The words a person reads for each basis of a figure (a ledger step's `basis`): one copy for
# the HTML report, `rackscale report show` and the server's dashboard, so they never differ.
BASIS_TEXT = {"spec": "fleet spec", "inventory": "inventory", "measured": "measured (real)",
              "simulated": "simulated (twin)", "recorded": "recorded events",
              "not_run": "not run"}


def basis_text(basis: object) -> str:
    """The words for a basis; an unknown one is shown as it is stored."""
    return BASIS_TEXT.get(str(basis), str(basis))
