"""Read what the report needs from the store, and nothing from other rooms' internals.

Inputs (docs/contracts.md): the loaded fleet spec and the inventory, and the event log:
`lifecycle.*` (latest `lifecycle.transition` per component is its state), the latest
`certify.run`, the `certify.finding` and `certify.result` events that are still their part's
newest evidence (the fleet state decides: `FleetState.stands`), and the latest
`simulate.run` of the same fleet (a newer one of another fleet is reported, not applied), and
the fleet's latest `simulate.sweep`. Missing events are not an error: the report says "not run".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rackscale.errors import UserError
from rackscale.fleet import GPU, FleetSpec, Topology
from rackscale.state import FleetState
from rackscale.store import CertifyRunV1, Event, Kind, LifecycleTransitionV1, Store

LIFECYCLE_RECENT = 200  # newest lifecycle events kept in full (the report shows these)


CERTIFY_EVIDENCE = (Kind.CERTIFY_FINDING, Kind.CERTIFY_RESULT)


class ReportInputError(UserError):
    pass


@dataclass(slots=True, kw_only=True)
class StoreView:
    """A consistent read of the store, taken once per report."""

    store_url: str
    topo: Topology
    fleet_event: Event | None
    inventory_gpus: set[str]
    inventory_counts: dict[str, int]
    # component id -> latest lifecycle.transition event of it
    states: dict[str, Event] = field(default_factory=dict)
    # the newest LIFECYCLE_RECENT lifecycle events, oldest first, and the count of every
    # lifecycle event by kind (a 128k fleet has hundreds of thousands: never all read)
    lifecycle_events: list[Event] = field(default_factory=list)
    lifecycle_counts: dict[str, int] = field(default_factory=dict)
    interlocks: list[Event] = field(default_factory=list)
    certify_run: Event | None = None  # the latest run
    # The findings and results that are still their part's newest evidence: of the latest run
    # for the parts it tested, of an older run for parts a newer (scoped) run left out.
    findings: list[Event] = field(default_factory=list)
    results: list[Event] = field(default_factory=list)
    simulate_run: Event | None = None  # the latest of this fleet
    # The newest simulate.run of another fleet when this fleet has none newer: not applied,
    # but the report says so rather than stay silent.
    other_simulation: Event | None = None
    simulate_sweep: Event | None = None  # the latest policy sweep of this fleet
    storage_whatif: Event | None = None  # the latest storage what-if of this fleet
    last_seq: int = 0

    def state_of(self, cid: str) -> str | None:
        ev = self.states.get(cid)
        return None if ev is None else ev.read(LifecycleTransitionV1).to


def _load_fleet(store: Store, fleet: str | None,
                until: int | None = None) -> tuple[FleetSpec, Event | None]:
    loaded = store.events(kind=Kind.FLEET_LOADED, newest_first=True, until_seq=until)
    rows = store.fleet_specs()
    if not rows:
        raise ReportInputError(
            f"no fleet is loaded in {store.safe_url}; load one with `rackscale fleet load "
            "--fleet seed-504` or run `rackscale demo`")
    if fleet is None:
        # The most recently loaded fleet is the one the inventory matches.
        fleet = next((e.component_id for e in loaded if e.component_id in rows), None)
        fleet = fleet or sorted(rows)[0]
    if fleet not in rows:
        raise ReportInputError(f"fleet {fleet!r} is not loaded in {store.safe_url}; loaded "
                               f"fleets: {', '.join(sorted(rows))}")
    event = next((e for e in loaded if e.component_id == fleet), None)
    return FleetSpec.model_validate(rows[fleet]), event


def _latest(store: Store, kind: Kind, until: int | None,
            component_id: str | None = None) -> Event | None:
    found = store.events(kind=kind, component_id=component_id, newest_first=True, limit=1,
                         until_seq=until)
    return found[0] if found else None


def _lifecycle(store: Store, view: StoreView, until: int | None) -> None:
    view.lifecycle_counts = store.count_events_by_kind("lifecycle.", until_seq=until)
    if not view.lifecycle_counts:
        return
    view.states = {e.component_id: e
                   for e in store.latest_events(Kind.LIFECYCLE_TRANSITION, until_seq=until)}
    recent = store.events(kind_prefix="lifecycle.", newest_first=True, limit=LIFECYCLE_RECENT,
                          until_seq=until)
    view.lifecycle_events = recent[::-1]
    view.interlocks = store.events(kind=Kind.LIFECYCLE_INTERLOCK, until_seq=until)


def _standing(store: Store, view: StoreView, newest: str, until: int | None) -> None:
    """Fold the fleet state's certification conditions and keep the evidence it says still
    stands (`newest`: the latest run's id): a scoped run's `not_run` leaves every other part
    on its older run. (Its lifecycle and plant are not needed here: the lifecycle states are
    read above, newest per part.)"""
    events = store.events(kinds=CERTIFY_EVIDENCE, until_seq=until)
    state = FleetState(view.topo)
    state.apply_all(events)
    view.findings = [e for e in events if e.kind == Kind.CERTIFY_FINDING
                     and state.stands(e, newest)]
    view.results = [e for e in events if e.kind == Kind.CERTIFY_RESULT
                    and state.stands(e, newest)]


def collect(store: Store, *, fleet: str | None = None, until_seq: int | None = None) -> StoreView:
    """The report's read of the store; with `until_seq`, of the event log as it stood when
    event `until_seq` was the newest (the inventory and fleet spec are the store's current
    ones: it keeps no older copies; `report/asof.py` says when they changed since)."""
    until = until_seq
    spec, fleet_event = _load_fleet(store, fleet, until)
    topo = Topology.build(spec)
    gpus = store.component_ids(kind=GPU)
    view = StoreView(store_url=store.safe_url, topo=topo, fleet_event=fleet_event,
                     inventory_gpus=gpus, inventory_counts=store.counts_by_kind())
    _lifecycle(store, view, until)
    view.certify_run = _latest(store, Kind.CERTIFY_RUN, until)
    if view.certify_run is not None:
        _standing(store, view, view.certify_run.read(CertifyRunV1).run_id, until)
    # A simulation belongs to the fleet it names (its event's component); another fleet's
    # ETTR says nothing about this one.
    view.simulate_run = _latest(store, Kind.SIMULATE_RUN, until, spec.name)
    newest_sim = _latest(store, Kind.SIMULATE_RUN, until)
    if newest_sim is not None and newest_sim.component_id != spec.name and (
            view.simulate_run is None or newest_sim.seq > view.simulate_run.seq):
        view.other_simulation = newest_sim
    view.simulate_sweep = _latest(store, Kind.SIMULATE_SWEEP, until, spec.name)
    view.storage_whatif = _latest(store, Kind.SIMULATE_STORAGE_WHATIF, until, spec.name)
    view.last_seq = store.newest_seq(until_seq=until)
    return view
