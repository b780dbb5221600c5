"""The store: one database (SQLite file by default, PostgreSQL by URL) behind one API.

    store = Store("sqlite:///rackscale-data/rackscale.db")
    store.append_event("us-east/r01", Kind.LIFECYCLE_TRANSITION, {"to": "powered"},
                       actor="controller", reason="coolant flow verified")
"""

from __future__ import annotations

import os
import tempfile
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import (
    Engine,
    Text,
    cast,
    create_engine,
    event,
    func,
    insert,
    select,
    type_coerce,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
)
from sqlalchemy.orm import Session, sessionmaker

from rackscale.errors import UserError
from rackscale.redact import redact, redact_url, url_secrets
from rackscale.store import jsondoc
from rackscale.store.events import (
    EVENT_KINDS,
    InvalidPayload,
    KindName,
    Payload,
    UnknownEventKind,
    parse,
    validated,
)
from rackscale.store.schema import Base, ComponentRow, EventRow, FleetRow


class StoreError(UserError):
    # True for the catch-all "cannot open" message: a session re-raises the original error
    # instead (it is a bug or a rule of the schema, not something the operator can fix).
    generic = False


class ConcurrentChange(StoreError):
    """Another process wrote the same rows in the same moment; running again is safe."""


DEFAULT_DATA_DIR = "rackscale-data"
# How long a command waits for another process's SQLite write lock before it gives up with a
# message (a controller pass holds it for well under a second).
LOCK_TIMEOUT_ENV = "RACKSCALE_DB_LOCK_TIMEOUT_S"
DEFAULT_LOCK_TIMEOUT_S = 10.0


def _with_quoted_password(url: str) -> str:
    """`url` with a password that holds `@` percent-encoded. SQLAlchemy splits the authority
    at its first `@` (so `ops:S3c@ret@db` would connect to host `ret@db` and print half the
    password as a host name); a URL's authority ends at its last `@`, as urllib reads it."""
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0].split("?", 1)[0]
    if not sep or authority.count("@") < 2:
        return url
    userinfo, _, host = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    quoted = f"{user}{colon}{urllib.parse.quote(password, safe='')}@{host}"
    return f"{scheme}://{quoted}{rest[len(authority):]}"


def lock_timeout_s() -> float:
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise StoreError(f"{LOCK_TIMEOUT_ENV}={raw!r}: give seconds between 0 and 3600")
    return value


def default_db_url() -> str:
    """RACKSCALE_DB if set, else a SQLite file under ./rackscale-data/."""
    return os.environ.get("RACKSCALE_DB") or f"sqlite:///{DEFAULT_DATA_DIR}/rackscale.db"


P = TypeVar("P", bound=Payload)


@dataclass(slots=True)
class _Parsed:
    """The model of one stored payload, parsed on first read; the events of one read whose
    stored JSON is the same text share one (a run's passing results: 34k at 128k GPUs)."""

    model: Payload | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """One event of the log. Readers read its payload through its kind's model: `read(Model)`
    (typed: `ev.read(CertifyResultV1).verdict`) or `data`; `payload` is the JSON object as
    stored, for what copies events out whole (`as_dict`, the evidence bundle)."""

    seq: int
    time: datetime
    component_id: str
    kind: str
    payload: dict[str, Any]
    actor: str
    reason: str
    # the payload as its model, parsed on first read (a report reads 34k results; most
    # commands read a few events of many they list)
    _parsed: _Parsed | None = field(default=None, init=False, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "time": self.time.isoformat(), "component": self.component_id,
                "kind": self.kind, "payload": self.payload, "actor": self.actor,
                "reason": self.reason}

    @classmethod
    def from_dicts(cls, rows: list[Any]) -> list[Event] | None:
        """Many events `as_dict` wrote, fast: None when one is not an event (then
        `from_dict` line by line names it)."""
        when: dict[str, datetime] = {}  # events appended together share a time
        iso = datetime.fromisoformat
        try:
            # positional and unconverted: at 100k+ events the conversions were a third of
            # the parse; the types are checked once below instead
            events = [cls(d["seq"], when[d["time"]] if d["time"] in when else when.setdefault(
                d["time"], iso(d["time"])), d["component"], d["kind"], d["payload"] or {},
                d["actor"], d["reason"]) for d in rows]
        except (KeyError, TypeError, ValueError):
            return None
        ok = all(type(e.seq) is int and type(e.payload) is dict and type(e.component_id) is str
                 for e in events)
        return events if ok else None

    @classmethod
    def from_dict(cls, d: Any) -> Event:
        """The event `as_dict` wrote (a bundle's line, a job's incidents.jsonl, a report's
        event list); ValueError naming what is wrong when `d` is not one."""
        if not isinstance(d, dict) or type(d.get("seq")) is not int or not isinstance(
                d.get("payload") or {}, dict):
            raise ValueError("not an event (seq must be an integer, payload an object)")
        try:
            return cls(seq=int(d["seq"]), time=datetime.fromisoformat(d["time"]),
                       component_id=str(d["component"]), kind=str(d["kind"]),
                       payload=dict(d["payload"] or {}), actor=str(d["actor"]),
                       reason=str(d["reason"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not an event ({type(err).__name__}: {err}); an event has seq, "
                             "time, component, kind, payload, actor, reason") from None

    @property
    def data(self) -> Payload:
        """The payload as its kind's model (store/events.py), of the version it was written
        with; UnknownEventKind for a kind no model is registered for, InvalidPayload if it
        does not fit (an event written before the contract checked it)."""
        cell = self._parsed
        if cell is None:
            cell = _Parsed()
            object.__setattr__(self, "_parsed", cell)
        if cell.model is None:
            cell.model = parse(self.kind, self.payload)
        return cell.model

    def parsed(self) -> Payload:
        """The payload as its kind's model (the same as `data`)."""
        return self.data

    def read(self, model: type[P]) -> P:
        """The payload as `model`, the reader's model of this kind: InvalidPayload when the
        event is of another kind or version (a reader must not take one kind for another)."""
        data = self.data
        if not isinstance(data, model):
            raise InvalidPayload(
                f"event seq {self.seq} is {self.kind} (payload model {type(data).__name__}); "
                f"its reader expected {model.KIND or 'an unregistered kind'} "
                f"({model.__name__})")
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class NewEvent:
    component_id: str
    kind: KindName
    payload: dict[str, Any] | Payload = field(default_factory=dict)
    actor: str = "rackscale"
    reason: str = ""
    time: datetime | None = None


_EVENT_COLS = (EventRow.seq, EventRow.time, EventRow.component_id, EventRow.kind,
               EventRow.payload, EventRow.actor, EventRow.reason)
# The same columns with the payload as its stored JSON text (and, on SQLite, the time as its
# stored text): decoded in bulk by `_decoded`, not row by row through SQLAlchemy's type
# processors, which at 68k events (a 128k-GPU fleet's states and certify results) were most
# of the report's store read.
_RAW_COLS = {
    "sqlite": (EventRow.seq, type_coerce(EventRow.time, Text), EventRow.component_id,
               EventRow.kind, type_coerce(EventRow.payload, Text), EventRow.actor,
               EventRow.reason),
    # PostgreSQL's driver turns timestamps into datetimes in C already; JSON comes as text.
    "postgresql": (EventRow.seq, EventRow.time, EventRow.component_id, EventRow.kind,
                   cast(EventRow.payload, Text), EventRow.actor, EventRow.reason),
}


def _sqlite_time(text: str) -> datetime:
    # What UTCDateTime stores on SQLite: ISO text without an offset, always UTC; the offset
    # appended makes it aware in the one C call.
    try:
        return datetime.fromisoformat(text + "+00:00")
    except ValueError:
        t = datetime.fromisoformat(text)  # an offset of its own (not written by rackscale)
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _decoded(rows: Sequence[Any], dialect: str) -> list[Event]:
    """Events of rows over `_RAW_COLS`: every payload decoded by one `jsondoc.loads` over a JSON
    array of the stored texts (one C call instead of one Python call chain per row)."""
    if not rows:
        return []
    _known_kinds(rows)
    payloads = jsondoc.loads("[" + ",".join(r[4] or "null" for r in rows) + "]")
    sqlite = dialect == "sqlite"
    events = [Event(r[0], _sqlite_time(r[1]) if sqlite else r[1], r[2], r[3], p or {}, r[5],
                    r[6]) for r, p in zip(rows, payloads, strict=True)]
    cells: dict[tuple[str, str], _Parsed] = {}
    for r, ev in zip(rows, events, strict=True):
        key = (r[3], r[4] or "")
        cell = cells.get(key)
        if cell is None:
            cell = cells[key] = _Parsed()
        object.__setattr__(ev, "_parsed", cell)
    return events


def _known_kinds(rows: Sequence[Any]) -> None:
    """Refuse rows of a kind no payload model is registered for (a store written by another
    rackscale version, or by hand): every reader reads payloads through their model, and an
    event nobody can read must not pass as one that says nothing."""
    unknown = {r[3] for r in rows} - set(EVENT_KINDS)
    if unknown:
        kind = min(unknown)
        seq = next(r[0] for r in rows if r[3] == kind)
        raise UnknownEventKind(
            f"event seq {seq} is of kind {kind!r}, which no payload model is registered for "
            f"(written by another rackscale version?); valid kinds: "
            f"{', '.join(EVENT_KINDS.names())}")


def _under(column: Any, scope: str) -> Any:
    """`column` is `scope` itself or an id below it (ids are paths)."""
    return (column == scope) | column.startswith(scope + "/", autoescape=True)


def _until(q: Any, until_seq: int | None) -> Any:
    """`q` over the log as it stood when event `until_seq` was the newest (None: now)."""
    return q if until_seq is None else q.where(EventRow.seq <= until_seq)


def _component_filter(q: Any, kind: str | None, scope: str | None) -> Any:
    if kind is not None:
        q = q.where(ComponentRow.kind == kind)
    if scope is not None:
        q = q.where(_under(ComponentRow.id, scope))
    return q


def known_kind(kind: str) -> str:
    """`kind` if an event kind of that name exists, else UnknownEventKind listing the valid
    ones: a misspelt kind in a query would otherwise match nothing, and an empty answer reads
    as "no such events"."""
    EVENT_KINDS[kind]
    return kind


def known_prefix(prefix: str) -> str:
    """`prefix` if some event kind starts with it (UnknownEventKind otherwise)."""
    if not any(name.startswith(prefix) for name in EVENT_KINDS.names()):
        raise UnknownEventKind(f"no event kind starts with {prefix!r}; valid kinds: "
                               f"{', '.join(EVENT_KINDS.names())}")
    return prefix


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (the CLI, the dashboard) run while the controller writes; NORMAL
    # synchronous is durable across process crashes in WAL mode, which is what kill -9 tests.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA busy_timeout={int(lock_timeout_s() * 1000)}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


class Store:
    """Sessions, the event log and the component inventory over one SQLAlchemy engine."""

    def __init__(self, url: str | None = None, *, echo: bool = False,
                 readonly: bool = False) -> None:
        """Open the store. `readonly` (inspection commands): create no file, directory or
        table; a missing SQLite file is an error. Otherwise the database must accept writes,
        checked now, before a command does work it could not record."""
        self.url = _with_quoted_password(url or default_db_url())
        self.readonly = readonly
        parsed = self._parse()
        self.dialect = parsed.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise StoreError(
                f"unsupported database {self.dialect!r} in {self.safe_url!r}; rackscale runs "
                "on sqlite and postgresql"
            )
        file = parsed.database if self.dialect == "sqlite" else None
        if file in ("", ":memory:") or (file or "").startswith("file:"):
            file = None
        if file is not None:
            self._check_sqlite_file(file)
        try:
            # Standard JSON on every backend, non-finite figures kept (see store/jsondoc.py).
            self.engine: Engine = create_engine(self.url, echo=echo, future=True,
                                                json_serializer=jsondoc.dumps,
                                                json_deserializer=jsondoc.loads)
        except (NoSuchModuleError, ModuleNotFoundError) as err:
            raise StoreError(
                f"no database driver for {self.safe_url!r} ({self._mask(str(err))}); for "
                "PostgreSQL install rackscale[postgres]"
            ) from None
        if self.dialect == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self.ensure_tables()
        if not readonly:
            self._check_writable()

    def _mask(self, text: str) -> str:
        return redact(text, secrets=url_secrets(self.url))

    def _parse(self) -> Any:
        try:
            parsed = make_url(self.url)
            _ = parsed.port  # a port that is not a number raises here, not at connect
        except (ArgumentError, ValueError):
            raise StoreError(
                f"cannot parse database URL {self._mask(self.url)!r}; use sqlite:///PATH or "
                "postgresql+psycopg://USER@HOST[:PORT]/DB (the port a number)"
            ) from None
        if parsed.port is not None and not 0 < parsed.port < 65536:
            raise StoreError(f"database URL {self._mask(self.url)!r}: port {parsed.port} is "
                             "not a TCP port (1-65535)")
        return parsed

    def _check_sqlite_file(self, file: str) -> None:
        path = os.path.abspath(file)
        if os.path.isdir(path):
            raise StoreError(f"database {path} is a directory; give a file path in --db "
                             "(sqlite:///DIR/rackscale.db)")
        if self.readonly:
            if not os.path.exists(path):
                raise StoreError(f"no database at {path}; load a fleet first with `rackscale "
                                 "fleet load`, or point --db / $RACKSCALE_DB at yours")
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create the directory of database {path} "
                             f"({err.strerror}); give a writable --db path") from None

    def ensure_tables(self) -> None:
        """Create missing tables (rooms call it again after declaring their own). A read-only
        store creates nothing: inspection must not change what it inspects."""
        try:
            if self.readonly:
                with self.engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return
            self._create_all()
        except DatabaseError as err:
            raise self._translate(err) from None

    def _create_all(self) -> None:
        # create_all checks, then creates: two processes opening a new database at once can
        # both see a table missing, and the slower one's CREATE fails with "already exists".
        # That is a race, not a fault: the next pass sees the table and skips it.
        for attempt in range(3):
            try:
                Base.metadata.create_all(self.engine)
                return
            except OperationalError as err:
                if "already exists" not in str(err.orig).lower() or attempt == 2:
                    raise

    def _translate(self, err: DatabaseError) -> StoreError:
        """One clear message for what a database can refuse, with passwords masked."""
        text = self._mask(str(err.orig))
        low = text.lower()
        # A unique key taken between our read and our write, or (SQLite WAL) a write from a
        # snapshot another writer has moved past (SQLITE_BUSY_SNAPSHOT, 517): a race, not a
        # broken database.
        if (isinstance(err, IntegrityError) and "unique" in low) or \
                getattr(err.orig, "sqlite_errorcode", None) == 517:
            return ConcurrentChange(
                f"another process changed {self.safe_url} at the same moment ({text}); "
                "nothing of this command was written, run it again")
        if "locked" in low or "busy" in low:
            return StoreError(
                f"database {self.safe_url} is locked by another process (waited "
                f"{lock_timeout_s():g} s, ${LOCK_TIMEOUT_ENV}); retry when it finishes, or "
                "stop the other rackscale command")
        if "readonly" in low or "read-only" in low or "read only" in low or \
                ("unable to open" in low and not self._sqlite_dir_writable()):
            return StoreError(
                f"database {self.safe_url} is read-only ({text}); fix its permissions or give "
                "a writable --db. Nothing was written.")
        if "no such table" in low:
            return StoreError(
                f"database {self.safe_url} holds none of this yet ({text}); load a fleet with "
                "`rackscale fleet load` and run the command that records it first")
        if "not a database" in low or "malformed" in low or "file is encrypted" in low:
            return StoreError(
                f"{self.safe_url} is not a rackscale database ({text}); give the path of a "
                "SQLite database, or a new path to create one")
        err_out = StoreError(
            f"cannot open database {self.safe_url}: {text}. Check that the server is "
            "running and the URL, user and database are right."
        )
        err_out.generic = True
        return err_out

    def _sqlite_dir_writable(self) -> bool:
        """Whether the SQLite file's directory takes new files (WAL mode needs its -wal and
        -shm files there, so a read-only directory shows as "unable to open")."""
        file = make_url(self.url).database if self.dialect == "sqlite" else None
        if not file or file == ":memory:":
            return True
        try:
            with tempfile.TemporaryFile(dir=os.path.dirname(os.path.abspath(file))):
                return True
        except OSError:
            return False

    def _check_writable(self) -> None:
        """Take the write lock once and release it: a read-only file, directory or mount (or
        a database locked for longer than the timeout) fails here, before any work."""
        if self.dialect != "sqlite":
            return
        try:
            with self.engine.connect() as conn:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS _rackscale_write_probe (x)")
                conn.exec_driver_sql("ROLLBACK")
        except DatabaseError as err:
            raise self._translate(err) from None

    @property
    def safe_url(self) -> str:
        return redact_url(self.url)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on any error. A database that
        refuses (locked past the timeout, read-only, not a database) is a StoreError."""
        try:
            with self._sessions() as s, s.begin():
                yield s
        except (OperationalError, IntegrityError) as err:
            translated = self._translate(err)
            if translated.generic:
                raise  # not the operator's problem (e.g. the append-only trigger): a bug
            raise translated from None

    def close(self) -> None:
        self.engine.dispose()

    # ------------------------------------------------------------------ events
    def append_event(self, component_id: str, kind: KindName,
                     payload: dict[str, Any] | Payload | None = None, *,
                     actor: str = "rackscale", reason: str = "",
                     time: datetime | None = None, session: Session | None = None) -> int:
        """Append one event; returns its sequence number. Pass `session` to make the event
        part of a larger transaction (a state change and its event commit together). The
        payload must fit its kind's model (store/events.py): an unknown kind or a bad payload
        raises before anything is written."""
        row = EventRow(time=time or datetime.now(UTC), component_id=component_id, kind=kind,
                       payload=validated(kind, payload), actor=actor, reason=reason)
        if session is not None:
            session.add(row)
            session.flush()
            return row.seq
        with self.session() as s:
            s.add(row)
            s.flush()
            return row.seq

    def append_events(self, events: Iterable[NewEvent], *, session: Session | None = None) -> int:
        """Append many events in one INSERT; returns how many. Every payload is checked (as
        in `append_event`) before any is written."""
        rows = self._rows(events)
        if not rows:
            return 0
        if session is not None:
            session.execute(insert(EventRow), rows)
        else:
            with self.session() as s:
                s.execute(insert(EventRow), rows)
        return len(rows)

    def append_events_seqs(self, events: Iterable[NewEvent], *, session: Session) -> list[int]:
        """Append events inside `session`, returning their sequence numbers in order (for
        rows of a room's own table that point at their event). One bulk INSERT ... RETURNING
        (batched by SQLAlchemy), not an ORM object per event: a pass of the lifecycle
        controller at 128k GPUs appends tens of thousands."""
        rows = self._rows(events)
        if not rows:
            return []
        # Without `sort_by_parameter_order`: with it SQLAlchemy has no sentinel column to
        # order by on SQLite and falls back to one INSERT per row (106,680 statements for a
        # 128k-GPU onboarding). Rows of one multi-row INSERT take their autoincrement seqs in
        # the order they are listed, and each batch's seqs follow the previous batch's, so
        # the returned seqs sorted are the rows' seqs in order.
        stmt = insert(EventRow).returning(EventRow.seq)
        return sorted(session.scalars(stmt, rows))

    @staticmethod
    def _rows(events: Iterable[NewEvent]) -> list[dict[str, Any]]:
        now = datetime.now(UTC)
        return [{"time": e.time or now, "component_id": e.component_id, "kind": e.kind,
                 "payload": validated(e.kind, e.payload), "actor": e.actor, "reason": e.reason}
                for e in events]

    # The filters of one query, all keyword-only and optional: more than six by design.
    def events(self, *, component_id: str | None = None, prefix: str | None = None,
               kind: KindName | None = None, kind_prefix: str | None = None,
               after_seq: int | None = None, limit: int | None = None,
               newest_first: bool = False, component_ids: Iterable[str] | None = None,
               session: Session | None = None, until_seq: int | None = None,
               kinds: Iterable[KindName] | None = None) -> list[Event]:
        """Events in seq order (or newest first) matching every filter given. `session`
        reads inside a caller's transaction (what it wrote so far is visible); `until_seq`
        reads the log as it stood when event `until_seq` was the newest. A kind (or prefix)
        that names no event kind raises UnknownEventKind."""
        q = select(*_EVENT_COLS)
        if component_id is not None:
            q = q.where(EventRow.component_id == component_id)
        if component_ids is not None:
            q = q.where(EventRow.component_id.in_(list(component_ids)))
        if prefix is not None:
            q = q.where(_under(EventRow.component_id, prefix))
        if kind is not None:
            q = q.where(EventRow.kind == known_kind(kind))
        if kinds is not None:
            q = q.where(EventRow.kind.in_([known_kind(k) for k in kinds]))
        if kind_prefix is not None:
            q = q.where(EventRow.kind.startswith(known_prefix(kind_prefix), autoescape=True))
        if after_seq is not None:
            q = q.where(EventRow.seq > after_seq)
        q = _until(q, until_seq)
        q = q.order_by(EventRow.seq.desc() if newest_first else EventRow.seq)
        if limit is not None:
            q = q.limit(limit)
        return self._events(q, session)

    def _events(self, q: Any, session: Session | None = None) -> list[Event]:
        """Events of a Core query over `_EVENT_COLS`: plain rows, no ORM objects (at 128k GPUs
        the ORM was most of the report's build time), payloads decoded in bulk."""
        q = q.with_only_columns(*_RAW_COLS[self.dialect], maintain_column_froms=True)
        if session is not None:
            return _decoded(session.execute(q).all(), self.dialect)
        with self.session() as s:
            return _decoded(s.execute(q).all(), self.dialect)

    def latest_events(self, kind: KindName, *, until_seq: int | None = None) -> list[Event]:
        """The newest event of `kind` of every component (e.g. each one's state), by seq;
        with `until_seq`, the newest up to that event."""
        latest = (_until(select(func.max(EventRow.seq)).where(EventRow.kind == known_kind(kind)),
                         until_seq)
                  .group_by(EventRow.component_id))
        return self._events(select(*_EVENT_COLS).where(EventRow.seq.in_(latest))
                            .order_by(EventRow.seq))

    def events_with(self, kind: KindName, key: str, value: object, *,
                    until_seq: int | None = None, limit: int | None = None) -> list[Event]:
        """Events of `kind` whose payload has `key` equal to `value` (filtered in the
        database, e.g. one run's findings), by seq, up to event `until_seq` when given."""
        q = _until(select(*_EVENT_COLS).where(EventRow.kind == known_kind(kind))
                   .where(EventRow.payload[key].as_string() == str(value)), until_seq)
        q = q.order_by(EventRow.seq).limit(limit)
        return [e for e in self._events(q) if e.payload.get(key) == value]

    def count_events_by_kind(self, kind_prefix: str | None = None, *,
                             until_seq: int | None = None) -> dict[str, int]:
        """How many events of each kind (under `kind_prefix`, up to event `until_seq`), by
        kind."""
        q = _until(select(EventRow.kind, func.count()), until_seq)
        q = q.group_by(EventRow.kind).order_by(EventRow.kind)
        if kind_prefix is not None:
            q = q.where(EventRow.kind.startswith(known_prefix(kind_prefix), autoescape=True))
        with self.session() as s:
            return {k: int(n) for k, n in s.execute(q)}

    def newest_seq(self, *, until_seq: int | None = None) -> int:
        """The seq of the newest event (up to `until_seq`; 0 on an empty log): one index
        lookup. Nothing in the log changed while this stays the same."""
        with self.session() as s:
            return int(s.scalar(_until(select(func.max(EventRow.seq)), until_seq)) or 0)

    def count_events(self, kind_prefix: str | None = None) -> int:
        q = select(func.count()).select_from(EventRow)
        if kind_prefix is not None:
            q = q.where(EventRow.kind.startswith(known_prefix(kind_prefix), autoescape=True))
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

    def counts_by_kind(self) -> dict[str, int]:
        q = select(ComponentRow.kind, func.count()).group_by(ComponentRow.kind)
        with self.session() as s:
            return {k: int(n) for k, n in s.execute(q)}
