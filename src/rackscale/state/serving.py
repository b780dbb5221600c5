"""Whether a part's GPUs can take a job: one rule, read by every count of GPUs by state.

A tray's own lifecycle row can say `production` while its rack is isolated, draining or in
maintenance: the rack's state wins then (a job cannot use a tray of a rack that takes no job),
so the tray counts in its rack's state. A tray out on its own (triage, repair, rma) keeps its
own state, which says why.
"""

from __future__ import annotations

# Rack states in which its trays may serve jobs (be resumed in Slurm).
SERVING_RACK_STATE_NAMES = frozenset({"production", "degraded"})
# Tray states that take a tray out of service on its own account.
BAD_TRAY_STATE_NAMES = frozenset({"triage", "repair", "rma"})


def serving_state(tray_state: str | None, rack_state: str | None) -> str | None:
    """The state that decides whether a job can use the tray's GPUs: the tray's own, or its
    rack's when the tray is in production and the rack does not serve."""
    if tray_state == "production" and rack_state is not None \
            and rack_state not in SERVING_RACK_STATE_NAMES:
        return rack_state
    return tray_state


def serves(tray_state: str | None, rack_state: str | None) -> bool:
    """Whether a job may be placed on the tray now (its rack serves and it is in production)."""
    return rack_state in SERVING_RACK_STATE_NAMES and tray_state == "production"
