"""SQLAlchemy schema: the inventory of components and the append-only event log.

Rooms that need tables of their own (lifecycle state, certification findings) declare them on
this `Base` in their own module and call `Store.ensure_tables()` after importing it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Index,
    Integer,
    String,
    Text,
    event,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.schema import DDL
from sqlalchemy.types import TypeDecorator

# SQLite only auto-increments INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit sequence.
SeqType = BigInteger().with_variant(Integer(), "sqlite")


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on the way out, whatever the backend stores (SQLite drops tz)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use datetime.now(UTC)")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class ComponentRow(Base):
    __tablename__ = "components"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)
    parent: Mapped[str | None] = mapped_column(String(200), index=True)
    region: Mapped[str] = mapped_column(String(64), index=True)
    rack: Mapped[str | None] = mapped_column(String(200), index=True)
    sku: Mapped[str | None] = mapped_column(String(64))
    attributes: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class EventRow(Base):
    """One line of the append-only log. Database triggers refuse UPDATE and DELETE."""

    __tablename__ = "events"

    seq: Mapped[int] = mapped_column(SeqType, primary_key=True, autoincrement=True)
    time: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    component_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    actor: Mapped[str] = mapped_column(String(64))
    reason: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (
        Index("ix_events_component_seq", "component_id", "seq"),
        Index("ix_events_kind_seq", "kind", "seq"),
    )


class FleetRow(Base):
    """The spec that was last loaded, so `fleet load` can say what changed."""

    __tablename__ = "fleet"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    loaded_at: Mapped[datetime] = mapped_column(UTCDateTime)


# sqlalchemy leaves DDL's constructor unannotated; it takes the statement's SQL text.
_new_ddl = cast("Callable[[str], DDL]", DDL)

# Append-only is enforced by the database itself, not only by the absence of an API.
_SQLITE_GUARDS = [
    _new_ddl(
        "CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END"
    ),
    _new_ddl(
        "CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events "
        "BEGIN SELECT RAISE(ABORT, 'events are append-only'); END"
    ),
]
_PG_GUARDS = [
    _new_ddl(
        "CREATE OR REPLACE FUNCTION rackscale_events_append_only() RETURNS trigger AS $$ "
        "BEGIN RAISE EXCEPTION 'events are append-only'; END; $$ LANGUAGE plpgsql"
    ),
    _new_ddl(
        "CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events "
        "FOR EACH ROW EXECUTE FUNCTION rackscale_events_append_only()"
    ),
]
for _ddl in _SQLITE_GUARDS:
    event.listen(EventRow.__table__, "after_create", _ddl.execute_if(dialect="sqlite"))
for _ddl in _PG_GUARDS:
    event.listen(EventRow.__table__, "after_create", _ddl.execute_if(dialect="postgresql"))
