"""The store: component inventory and append-only event log; SQLite default, PostgreSQL by URL.

Every event kind has a typed, versioned payload model (`rackscale.store.events`); the store
checks each payload against it on append."""

from rackscale.store.db import (
    DEFAULT_DATA_DIR,
    ConcurrentChange,
    Event,
    NewEvent,
    Store,
    StoreError,
    default_db_url,
)
from rackscale.store.events import (
    EVENT_KINDS,
    CertifyFindingV1,
    CertifyResultV1,
    CertifyRunV1,
    Closed,
    EventKind,
    FleetLoadedV1,
    InvalidPayload,
    LifecycleInterlockV1,
    LifecycleNotedV1,
    LifecycleSlurmV1,
    LifecycleTransitionV1,
    Payload,
    RackAddedV1,
    RackRemovedV1,
    RecoveryIncidentV1,
    RecoveryJobV1,
    SimulateRunV1,
    SimulateStorageWhatifV1,
    SimulateSweepV1,
    UnknownEventKind,
    event_kind,
)
from rackscale.store.loader import FleetMismatch, LoadResult, load_topology, loaded_spec
from rackscale.store.schema import Base, ComponentRow, EventRow, FleetRow, UTCDateTime

__all__ = [
    "DEFAULT_DATA_DIR", "EVENT_KINDS", "Base", "CertifyFindingV1", "CertifyResultV1",
    "CertifyRunV1", "Closed", "ComponentRow", "ConcurrentChange", "Event", "EventKind", "EventRow",
    "FleetLoadedV1", "FleetMismatch", "FleetRow", "InvalidPayload", "LifecycleInterlockV1",
    "LifecycleNotedV1", "LifecycleSlurmV1", "LifecycleTransitionV1", "LoadResult", "NewEvent",
    "Payload", "RackAddedV1", "RackRemovedV1", "RecoveryIncidentV1", "RecoveryJobV1",
    "SimulateRunV1", "SimulateStorageWhatifV1", "SimulateSweepV1", "Store", "StoreError",
    "UTCDateTime", "UnknownEventKind", "default_db_url", "event_kind", "load_topology",
    "loaded_spec",
]
