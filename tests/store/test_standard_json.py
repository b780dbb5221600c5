"""Stored documents are standard JSON on every backend: a figure that is not finite (a job
that saw no interruption has an infinite MTTF) is stored as null, and the event's reason names
it, on SQLite and on a real PostgreSQL alike (whose JSON type refuses `Infinity`)."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.store import Kind, Store
from rackscale.store.jsondoc import dumps, standard


def _strict(raw: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"non-standard JSON constant {name} stored: {raw[:200]}")
    return json.loads(raw, parse_constant=refuse)


def _fresh_pg(postgres_url: str) -> str:
    name = f"stdjson_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return postgres_url.rsplit("/", 1)[0] + "/" + name


def _record_and_read(db: str) -> None:
    # A short run on a small fleet: no trial is interrupted, so the job's MTTF is infinite.
    r = CliRunner().invoke(app, ["simulate", "run", "--fleet", "seed-504", "--days", "0.01",
                                 "--trials", "5", "--record", "--db", db])
    assert r.exit_code == 0, r.output
    store = Store(db)
    with store.engine.connect() as c:
        raw, reason = c.execute(text("SELECT CAST(payload AS TEXT), reason FROM events "
                                     "WHERE kind = 'simulate.run'")).one()
    doc = _strict(raw)
    assert isinstance(doc, dict) and doc["job_mttf_h"] is None
    assert "job_mttf_h=inf" in reason and "stored as null" in reason
    ev = store.events(kind=Kind.SIMULATE_RUN)[-1]
    assert ev.payload["job_mttf_h"] is None


def test_a_non_finite_figure_is_stored_as_null_with_a_reason_on_sqlite(tmp_path: Path) -> None:
    _record_and_read(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.mark.postgres
def test_a_non_finite_figure_is_stored_as_null_with_a_reason_on_postgres(
        postgres_url: str) -> None:
    _record_and_read(_fresh_pg(postgres_url))


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none(),
                    st.text(max_size=5))
DOCS = st.recursive(NUMBERS, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=4), kids, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(DOCS)
def test_every_document_serializes_to_standard_json(doc: object) -> None:
    out = _strict(dumps(doc))
    cleaned, nulled = standard(doc)
    assert out == cleaned
    expected = sum(1 for f in _floats(doc) if not math.isfinite(f))
    assert len(nulled) == expected


def _floats(doc: object) -> list[float]:
    if isinstance(doc, float):
        return [doc]
    if isinstance(doc, dict):
        return [f for v in doc.values() for f in _floats(v)]
    if isinstance(doc, list):
        return [f for v in doc for f in _floats(v)]
    return []
