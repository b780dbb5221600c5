"""Operations both front ends perform on the lifecycle, each written once: `rackscale lifecycle
drain` and the server's `POST /api/v1/racks/{id}/drain` call these and only show the result."""

from __future__ import annotations

from rackscale.inputs import check_operator_text
from rackscale.lifecycle.repository import Transition, state_of, transition
from rackscale.lifecycle.states import RACK, RackState, TrayState
from rackscale.store import Store


def drain(store: Store, cid: str, *, actor: str, reason: str) -> Transition:
    """Take a rack (-> draining) or a tray (-> triage) out of service, as one legal
    transition with its reason in the history. An unenrolled id is refused in the
    lifecycle's words (UnknownLifecycleComponent), an illegal move as IllegalTransition; a
    reason with a control character (NUL, ESC) as OperatorTextError, before anything is read."""
    reason = check_operator_text(reason)
    row = state_of(store, cid)
    to = RackState.DRAINING if row.machine == RACK else TrayState.TRIAGE
    return transition(store, cid, to, actor=actor, reason=reason)
