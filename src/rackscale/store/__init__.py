"""The store: component inventory and append-only event log; SQLite default, PostgreSQL by URL."""

from rackscale.store.db import (
    DEFAULT_DATA_DIR,
    ConcurrentChange,
    Event,
    NewEvent,
    Store,
    StoreError,
    default_db_url,
)
from rackscale.store.loader import FleetMismatch, LoadResult, load_topology, loaded_spec
from rackscale.store.schema import Base, ComponentRow, EventRow, FleetRow, UTCDateTime

__all__ = [
    "DEFAULT_DATA_DIR", "Base", "ComponentRow", "ConcurrentChange", "Event", "EventRow",
    "FleetMismatch", "FleetRow", "LoadResult", "NewEvent", "Store", "StoreError",
    "UTCDateTime", "default_db_url", "load_topology", "loaded_spec",
]
