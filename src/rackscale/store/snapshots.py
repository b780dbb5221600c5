"""Snapshots: one opaque blob per fleet at one seq of the log, kept for a reader of the log
(the fleet state) so a new process does not fold the whole log again.

The store keeps the bytes, their seq and what they are valid for (`fingerprint`, given by the
reader); it does not read them. A snapshot is a cache: losing the row only costs time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import BigInteger, LargeBinary, String, inspect, select
from sqlalchemy.orm import Mapped, mapped_column

from rackscale.store.db import ConcurrentChange, Store
from rackscale.store.schema import Base, UTCDateTime


class SnapshotRow(Base):
    """The newest snapshot of one fleet (one row per fleet name)."""

    __tablename__ = "state_snapshots"

    fleet: Mapped[str] = mapped_column(String(128), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    fingerprint: Mapped[str] = mapped_column(String(80))
    body: Mapped[bytes] = mapped_column(LargeBinary)
    written_at: Mapped[datetime] = mapped_column(UTCDateTime)


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    seq: int
    body: bytes


def _table_exists(store: Store) -> bool:
    if not store.readonly:
        store.ensure_tables()
        return True
    # An inspection command creates nothing: a store written before snapshots has no table.
    return inspect(store.engine).has_table(SnapshotRow.__tablename__)


def read_snapshot(store: Store, fleet: str, fingerprint: str, *,
                  until_seq: int | None = None) -> StoredSnapshot | None:
    """The fleet's snapshot if it has `fingerprint` and was taken at or before `until_seq`."""
    if not _table_exists(store):
        return None
    with store.session() as s:
        row = s.execute(select(SnapshotRow.seq, SnapshotRow.fingerprint, SnapshotRow.body)
                        .where(SnapshotRow.fleet == fleet)).first()
    if row is None or row.fingerprint != fingerprint:
        return None
    if until_seq is not None and row.seq > until_seq:
        return None
    return StoredSnapshot(row.seq, row.body)


def write_snapshot(store: Store, fleet: str, fingerprint: str, seq: int, body: bytes) -> bool:
    """Keep `body` as the fleet's snapshot at `seq` unless one as new or newer (of the same
    fingerprint) is there; returns whether it was written. A read-only store writes nothing."""
    if store.readonly:
        return False
    store.ensure_tables()
    now = datetime.now(UTC)
    try:
        with store.session() as s:
            row = s.get(SnapshotRow, fleet)
            if row is not None and row.seq >= seq and row.fingerprint == fingerprint:
                return False
            if row is None:
                s.add(SnapshotRow(fleet=fleet, seq=seq, fingerprint=fingerprint, body=body,
                                  written_at=now))
            else:
                row.seq, row.fingerprint, row.body, row.written_at = seq, fingerprint, body, now
    except ConcurrentChange:
        # Another process inserted the fleet's first snapshot at the same moment: theirs is
        # as good as this one (both are the log folded to some seq), so this one is dropped.
        return False
    return True
