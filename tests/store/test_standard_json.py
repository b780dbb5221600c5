"""Stored documents are standard JSON on every backend, and read back as written: a figure
that is not finite (a job that saw no interruption has an infinite MTTF) is stored tagged
(`{"$nonfinite": "inf"}`) and read back as the float, on SQLite and on a real PostgreSQL alike
(whose JSON type refuses `Infinity`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from tests.pg import fresh_database
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.store import Kind, SimulateRunV1, Store
from rackscale.store.jsondoc import dumps, loads, tag


def _strict(raw: str) -> object:
    def refuse(name: str) -> object:
        raise AssertionError(f"non-standard JSON constant {name} stored: {raw[:200]}")
    return json.loads(raw, parse_constant=refuse)


def _fresh_pg(postgres_url: str) -> str:
    return fresh_database(postgres_url, "stdjson")


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
    assert isinstance(doc, dict) and doc["job_mttf_h"] == {"$nonfinite": "inf"}
    ev = store.events(kind=Kind.SIMULATE_RUN)[-1]
    assert ev.payload["job_mttf_h"] == math.inf
    # read through its model too (typed on read), and the reason is the writer's own
    assert ev.read(SimulateRunV1).job_mttf_h == math.inf and "not finite" not in (reason or "")


def test_a_non_finite_figure_round_trips_as_standard_json_on_sqlite(tmp_path: Path) -> None:
    _record_and_read(f"sqlite:///{tmp_path / 'r.db'}")


@pytest.mark.postgres
def test_a_non_finite_figure_round_trips_as_standard_json_on_postgres(
        postgres_url: str) -> None:
    _record_and_read(_fresh_pg(postgres_url))


NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.none(),
                    st.text(max_size=5))
DOCS = st.recursive(NUMBERS, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=4), kids, max_size=4)),
    max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(DOCS)
def test_every_document_serializes_to_standard_json_and_back(doc: object) -> None:
    text = dumps(doc)
    assert _strict(text) == tag(doc) or _has_nan(doc)  # NaN != NaN: compared below
    back = loads(text)
    assert _same(back, doc)
    assert [repr(f) for f in _floats(back)] == [repr(f) for f in _floats(doc)]


def _has_nan(doc: object) -> bool:
    return any(math.isnan(f) for f in _floats(doc))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _floats(doc: object) -> list[float]:
    if isinstance(doc, float):
        return [doc]
    if isinstance(doc, dict):
        return [f for v in doc.values() for f in _floats(v)]
    if isinstance(doc, list):
        return [f for v in doc for f in _floats(v)]
    return []
