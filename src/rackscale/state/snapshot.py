"""A persisted copy of the fleet state at one seq, so a new process does not fold the whole log.

At 128k GPUs the log holds about 180k folded events and a fresh `FleetState` took 2.5 s to
read and fold them: every `lifecycle run --once`, `lifecycle status` or report paid it. A
snapshot is the state's own contents (conditions, lifecycle states, repair seqs, the plant's
event seq) at seq N, as compressed JSON in one row per fleet; a process loads it and folds only
the events after N. It is a cache of the log, never a source: a snapshot of another topology
(the fleet reloaded with another shape) is ignored, and deleting the row only costs time.

The table is declared here, on the store's `Base`, as rooms declare their own tables.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import BigInteger, LargeBinary, String, inspect, select
from sqlalchemy.orm import Mapped, mapped_column

from rackscale.fleet import Topology
from rackscale.store import Base, ConcurrentChange, Store, UTCDateTime

FORMAT = 1  # the body's layout; a snapshot of another format is ignored


class SnapshotRow(Base):
    """The newest snapshot of one fleet's state (one row per fleet name)."""

    __tablename__ = "state_snapshots"

    fleet: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    fingerprint: Mapped[str] = mapped_column(String(80))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    written_at: Mapped[datetime] = mapped_column(UTCDateTime)


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    body: dict[str, object]


def fingerprint(topo: Topology) -> str:
    """What a snapshot is valid for: the fleet's shape (which ids exist, how racks route to the
    fabric) and the body's format."""
    spec = topo.spec.model_dump_json().encode()
    return f"v{FORMAT}:" + hashlib.sha256(spec).hexdigest()


def _table_exists(store: Store) -> bool:
    if not store.readonly:
        store.ensure_tables()
        return True
    # An inspection command creates nothing: a store written before snapshots has no table.
    return inspect(store.engine).has_table(SnapshotRow.__tablename__)


def read(store: Store, topo: Topology, *, until_seq: int | None = None) -> Snapshot | None:
    """The fleet's snapshot, if one of this topology exists at or before `until_seq`."""
    if not _table_exists(store):
        return None
    with store.session() as s:
        row = s.execute(select(SnapshotRow.seq, SnapshotRow.fingerprint, SnapshotRow.body)
                        .where(SnapshotRow.fleet == topo.spec.name)).first()
    if row is None or row.fingerprint != fingerprint(topo):
        return None
    if until_seq is not None and row.seq > until_seq:
        return None
    return Snapshot(row.seq, json.loads(zlib.decompress(row.body)))


def write(store: Store, topo: Topology, seq: int, body: dict[str, object]) -> bool:
    """Keep `body` as the fleet's snapshot at `seq` unless one as new or newer is there;
    returns whether it was written. A read-only store writes nothing."""
    if store.readonly:
        return False
    store.ensure_tables()
    blob = zlib.compress(json.dumps(body, separators=(",", ":")).encode(), 1)
    now = datetime.now(UTC)
    try:
        with store.session() as s:
            row = s.get(SnapshotRow, topo.spec.name)
            if row is not None and row.seq >= seq and row.fingerprint == fingerprint(topo):
                return False
            if row is None:
                s.add(SnapshotRow(fleet=topo.spec.name, seq=seq, fingerprint=fingerprint(topo),
                                  body=blob, written_at=now))
            else:
                row.seq, row.fingerprint, row.body, row.written_at = (
                    seq, fingerprint(topo), blob, now)
    except ConcurrentChange:
        # Another process inserted the fleet's first snapshot at the same moment: theirs is
        # as good as this one (both are the log folded to some seq), so this one is dropped.
        return False
    return True
