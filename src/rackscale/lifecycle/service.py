"""Operations both front ends perform on the lifecycle, each written once: `rackscale lifecycle
drain` and the server's `POST /api/v1/racks/{id}/drain` call these and only show the result."""

from __future__ import annotations

from rackscale.inputs import check_operator_text
from rackscale.lifecycle.repository import SLURM, Transition, state_of, transition
from rackscale.lifecycle.slurm import REASON_PREFIX, SlurmControl, node_name
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


def drain_out_of_service(store: Store, slurm: SlurmControl, trays: list[str], *,
                         actor: str) -> list[str]:
    """Drain, now, the Slurm node of each of `trays` the lifecycle holds out of production
    (triage, repair, ...), as the controller's next pass would: the same reason (so its
    resume undoes it when the tray is back in production), a `lifecycle.slurm` event per
    node. A node Slurm does not know, or one already drained (by rackscale or an operator),
    is left as it is. Returns the nodes drained. For Slurm's own hooks (a health check),
    which must not wait for the controller's pass."""
    known = slurm.nodes()
    drained: list[str] = []
    for tray in trays:
        row = state_of(store, tray)
        name = node_name(tray)
        if row.state == TrayState.PRODUCTION or name not in known or known[name]:
            continue
        reason = f"{REASON_PREFIX}tray {row.state}"
        slurm.drain([name], reason)
        store.append_event(tray, SLURM, {"action": "drain", "node": name}, actor=actor,
                           reason=reason)
        drained.append(name)
    return drained
