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
    CertifyFinding,
    CertifyResult,
    CertifyRun,
    Closed,
    EventKind,
    FleetLoaded,
    InvalidPayload,
    LifecycleInterlock,
    LifecycleNoted,
    LifecycleSlurm,
    LifecycleTransition,
    Payload,
    RackAdded,
    RackRemoved,
    RecoveryIncident,
    RecoveryJob,
    SimulateRun,
    SimulateStorageWhatif,
    SimulateSweep,
    UnknownEventKind,
    event_kind,
)
from rackscale.store.loader import FleetMismatch, LoadResult, load_topology, loaded_spec
from rackscale.store.schema import Base, ComponentRow, EventRow, FleetRow, UTCDateTime

__all__ = [
    "DEFAULT_DATA_DIR", "EVENT_KINDS", "Base", "CertifyFinding", "CertifyResult", "CertifyRun",
    "Closed", "ComponentRow", "ConcurrentChange", "Event", "EventKind", "EventRow", "FleetLoaded",
    "FleetMismatch", "FleetRow", "InvalidPayload", "LifecycleInterlock", "LifecycleNoted",
    "LifecycleSlurm", "LifecycleTransition", "LoadResult", "NewEvent", "Payload", "RackAdded",
    "RackRemoved", "RecoveryIncident", "RecoveryJob", "SimulateRun", "SimulateStorageWhatif",
    "SimulateSweep", "Store", "StoreError", "UTCDateTime", "UnknownEventKind", "default_db_url",
    "event_kind", "load_topology", "loaded_spec",
]
