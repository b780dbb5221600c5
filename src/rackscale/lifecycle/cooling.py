"""The racks under a coolant-fault response now, as a job's supervisor asks for them: the
lifecycle owns the response (interlocks.py: warn, cap, drain, off, isolate, each due a set
time after the fault is first seen), so what a job must do about a rack's cooling is read
from the lifecycle's rows, never worked out again from a CDU reading.

A rack at the drain tier or past it must lose its jobs (the response powers it off next); a
rack at a lower tier runs hot, so a straggler in it is its rack's cooling, not its GPU.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from rackscale.lifecycle.interlocks import CoolantTier
from rackscale.lifecycle.repository import LifecycleRow, open_store
from rackscale.lifecycle.states import RACK
from rackscale.store import Store


def coolant_conditions(store: Store, racks: set[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every enrolled rack (of `racks`, when given) whose coolant-fault response is under
    way: its tier's name, whether its jobs must leave (`drain`), when the fault was first
    seen (`since`, epoch seconds) and its lifecycle state. Asked every few seconds by a
    running job, so it only reads: the lifecycle's tables exist once `enrolled_racks` (or
    any lifecycle write) has opened the store."""
    q = select(LifecycleRow).where(LifecycleRow.machine == RACK, LifecycleRow.fault_tier > 0)
    with store.session() as s:
        rows = list(s.scalars(q))
    return {r.component_id: {"tier": CoolantTier(r.fault_tier).name.lower(),
                             "drain": r.fault_tier >= CoolantTier.DRAIN,
                             "since": r.fault_since, "state": r.state,
                             "basis": "the lifecycle's coolant-fault response"}
            for r in rows if racks is None or r.component_id in racks}


def enrolled_racks(store: Store, racks: set[str]) -> set[str]:
    """Those of `racks` the lifecycle knows (whose cooling it therefore answers for)."""
    store = open_store(store)
    q = select(LifecycleRow.component_id).where(LifecycleRow.machine == RACK,
                                                LifecycleRow.component_id.in_(sorted(racks)))
    with store.session() as s:
        return set(s.scalars(q))


def coolant_responses(store: Store, racks: set[str]) -> dict[str, dict[str, Any]]:
    """`coolant_conditions` of `racks`, or none when the lifecycle knows none of them (a store
    the lifecycle never enrolled has no table to ask): what telemetry's hot-rack rule asks."""
    return coolant_conditions(store, racks) if enrolled_racks(store, racks) else {}
