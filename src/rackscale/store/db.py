"""The store: one database (SQLite file by default, PostgreSQL by URL) behind one API.

    store = Store("sqlite:///rackscale-data/rackscale.db")
    store.append_event("us-east/r01", "lifecycle.transition", {"to": "powered"},
                       actor="controller", reason="coolant flow verified")
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, create_engine, event, func, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from rackscale.errors import UserError
from rackscale.store.schema import Base, ComponentRow, EventRow, FleetRow


class StoreError(UserError):
    pass


DEFAULT_DATA_DIR = "rackscale-data"


def default_db_url() -> str:
    """RACKSCALE_DB if set, else a SQLite file under ./rackscale-data/."""
    return os.environ.get("RACKSCALE_DB") or f"sqlite:///{DEFAULT_DATA_DIR}/rackscale.db"


@dataclass(frozen=True, slots=True)
class Event:
    seq: int
    time: datetime
    component_id: str
    kind: str
    payload: dict[str, Any]
    actor: str
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time.isoformat(), "component": self.component_id,
                "kind": self.kind, "payload": self.payload, "actor": self.actor,
                "reason": self.reason}


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    component_id: str
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    actor: str = "rackscale"
    reason: str = ""
    time: datetime | None = None


def _under(column: Any, scope: str) -> Any:
    """`column` is `scope` itself or an id below it (ids are paths)."""
    return (column == scope) | column.startswith(scope + "/", autoescape=True)


def _component_filter(q: Any, kind: str | None, scope: str | None) -> Any:
    if kind is not None:
        q = q.where(ComponentRow.kind == kind)
    if scope is not None:
        q = q.where(_under(ComponentRow.id, scope))
    return q


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (the CLI, the dashboard) run while the controller writes; NORMAL
    # synchronous is durable across process crashes in WAL mode, which is what kill -9 tests.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store:
    """Sessions, the event log and the component inventory over one SQLAlchemy engine."""

    def __init__(self, url: str | None = None, *, echo: bool = False) -> None:
        self.url = url or default_db_url()
        try:
            parsed = make_url(self.url)
        except ArgumentError:
            raise StoreError(
                f"cannot parse database URL {self.url!r}; use sqlite:///PATH or "
                "postgresql+psycopg://USER@HOST/DB"
            ) from None
        self.dialect = parsed.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise StoreError(
                f"unsupported database {self.dialect!r} in {self.url!r}; rackscale runs on "
                "sqlite and postgresql"
            )
        if self.dialect == "sqlite" and parsed.database not in (None, "", ":memory:"):
            os.makedirs(os.path.dirname(os.path.abspath(parsed.database)), exist_ok=True)
        try:
            self.engine: Engine = create_engine(self.url, echo=echo, future=True)
        except (NoSuchModuleError, ModuleNotFoundError) as err:
            raise StoreError(
                f"no database driver for {self.url!r} ({err}); for PostgreSQL install "
                "rackscale[postgres]"
            ) from None
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.ensure_tables()

    def ensure_tables(self) -> None:
        """Create missing tables (rooms call it again after declaring their own)."""
        try:
            Base.metadata.create_all(self.engine)
        except OperationalError as err:
            raise StoreError(
                f"cannot open database {self.safe_url}: {err.orig}. Check that the server is "
                "running and the URL, user and database are right."
            ) from None

    @property
    def safe_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any error."""
        with self._sessions() as s, s.begin():
            yield s

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ events
    def append_event(self, component_id: str, kind: str, payload: dict[str, Any] | None = None,
                     *, actor: str = "rackscale", reason: str = "",
                     time: datetime | None = None, session: Session | None = None) -> int:
        """Append one event; returns its sequence number. Pass `session` to make the event
        part of a larger transaction (a state change and its event commit together)."""
        row = EventRow(time=time or datetime.now(UTC), component_id=component_id, kind=kind,
                       payload=payload or {}, actor=actor, reason=reason)
        if session is not None:
            session.add(row)
            session.flush()
            return row.seq
        with self.session() as s:
            s.add(row)
            s.flush()
            return row.seq

    def append_events(self, events: Iterable[NewEvent], *, session: Session | None = None) -> int:
        now = datetime.now(UTC)
        rows = [{"time": e.time or now, "component_id": e.component_id, "kind": e.kind,
                 "payload": e.payload, "actor": e.actor, "reason": e.reason} for e in events]
        if not rows:
            return 0
        if session is not None:
            session.execute(insert(EventRow), rows)
        else:
            with self.session() as s:
                s.execute(insert(EventRow), rows)
        return len(rows)

    def events(self, *, component_id: str | None = None, prefix: str | None = None,
               kind: str | None = None, kind_prefix: str | None = None,
               after_seq: int | None = None, limit: int | None = None,
               newest_first: bool = False) -> list[Event]:
        q = select(EventRow)
        if component_id is not None:
            q = q.where(EventRow.component_id == component_id)
        if prefix is not None:
            q = q.where(_under(EventRow.component_id, prefix))
        if kind is not None:
            q = q.where(EventRow.kind == kind)
        if kind_prefix is not None:
            q = q.where(EventRow.kind.startswith(kind_prefix, autoescape=True))
        if after_seq is not None:
            q = q.where(EventRow.seq > after_seq)
        q = q.order_by(EventRow.seq.desc() if newest_first else EventRow.seq)
        if limit is not None:
            q = q.limit(limit)
        with self.session() as s:
            return [
                Event(seq=r.seq, time=r.time, component_id=r.component_id, kind=r.kind,
                      payload=r.payload or {}, actor=r.actor, reason=r.reason)
                for r in s.scalars(q)
            ]

    def count_events(self, kind_prefix: str | None = None) -> int:
        q = select(func.count()).select_from(EventRow)
        if kind_prefix is not None:
            q = q.where(EventRow.kind.startswith(kind_prefix, autoescape=True))
        with self.session() as s:
            return int(s.scalar(q) or 0)

    # ------------------------------------------------------------------ components
    def component(self, cid: str) -> ComponentRow | None:
        with self.session() as s:
            return s.get(ComponentRow, cid)

    def require_component(self, cid: str) -> ComponentRow:
        row = self.component(cid)
        if row is None:
            raise StoreError(
                f"unknown component id {cid!r} in {self.safe_url}; list ids with "
                "`rackscale fleet show` or load the fleet with `rackscale fleet load`"
            )
        return row

    def components(self, *, kind: str | None = None,
                   scope: str | None = None) -> list[ComponentRow]:
        q = select(ComponentRow)
        q = _component_filter(q, kind, scope)
        with self.session() as s:
            return list(s.scalars(q.order_by(ComponentRow.id)))

    def count_components(self, *, kind: str | None = None, scope: str | None = None) -> int:
        q = select(func.count()).select_from(ComponentRow)
        q = _component_filter(q, kind, scope)
        with self.session() as s:
            return int(s.scalar(q) or 0)

    def component_ids(self, *, kind: str) -> set[str]:
        """Ids of every inventory component of one kind (the report's installed GPUs)."""
        with self.session() as s:
            return set(s.scalars(select(ComponentRow.id).where(ComponentRow.kind == kind)))

    # ------------------------------------------------------------------ fleets
    def fleet_specs(self) -> dict[str, dict[str, Any]]:
        """Every loaded fleet's spec (as loaded, plain JSON), by fleet name."""
        with self.session() as s:
            return {r.name: r.spec for r in s.scalars(select(FleetRow))}

    def latest_fleet_spec(self) -> dict[str, Any] | None:
        """The spec of the fleet loaded (or reloaded) last, or None when none is loaded."""
        with self.session() as s:
            row = s.scalars(select(FleetRow).order_by(FleetRow.loaded_at.desc())).first()
            return None if row is None else row.spec

    def counts_by_kind(self) -> dict[str, int]:
        q = select(ComponentRow.kind, func.count()).group_by(ComponentRow.kind)
        with self.session() as s:
            return {k: int(n) for k, n in s.execute(q)}
