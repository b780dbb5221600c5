"""Certification evidence drives promotion outside the demo too: `lifecycle run --goal
production` promotes racks and trays that passed, whether certification ran before or after
enrollment; an operator cannot declare a rack certified without evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.lifecycle import LifecycleRow, counts, state_of
from rackscale.store import Store

runner = CliRunner()


def _ok(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code in (0, 1), r.output  # certify run exits 1 when it finds something
    return r.output


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, Path]:
    monkeypatch.chdir(tmp_path)
    db = f"sqlite:///{tmp_path / 'lc.db'}"
    _ok(["fleet", "load", "--fleet", "seed-504", "--db", db])
    return db, str(tmp_path / "plant.json"), tmp_path


def _certify(db: str, tmp: Path, faults: str | None = None) -> None:
    extra = ["--faults", faults] if faults else []
    _ok(["certify", "run", "--fleet", "seed-504", "--db", db, "--out",
         str(tmp), "--json", *extra])


def _run_to_production(db: str, plant: str) -> None:
    out = _ok(["lifecycle", "run", "--goal", "production", "--until-idle", "--passes", "60",
               "--period", "0", "--db", db, "--plant", plant])
    assert "Traceback" not in out


def test_run_promotes_trays_certified_after_enrollment(env: tuple[str, str, Path]) -> None:
    db, plant, tmp = env
    _ok(["lifecycle", "run", "--goal", "burn_in", "--until-idle", "--passes", "60",
         "--period", "0", "--db", db, "--plant", plant])
    assert counts(Store(db))["tray"] == {"burn_in": 126}
    _certify(db, tmp)
    _run_to_production(db, plant)
    c = counts(Store(db))
    assert c["rack"] == {"production": 7}
    assert c["tray"] == {"production": 126}


def test_certification_before_enrollment_is_used(env: tuple[str, str, Path]) -> None:
    db, plant, tmp = env
    _certify(db, tmp)  # before any lifecycle row exists
    _run_to_production(db, plant)
    c = counts(Store(db))
    assert c["rack"] == {"production": 7} and c["tray"] == {"production": 126}
    ev = json.loads(runner.invoke(app, ["lifecycle", "history", "us-east/r01/c01", "--json",
                                        "--db", db]).output)
    assert ev[-1]["payload"]["to"] == "production" and ev[-1]["payload"]["evidence_seq"] > 0


def test_failing_trays_stay_out_and_the_rest_are_promoted(env: tuple[str, str, Path]) -> None:
    db, plant, tmp = env
    _certify(db, tmp, faults="demo")
    _run_to_production(db, plant)
    store = Store(db)
    c = counts(store)
    assert c["tray"].get("production", 0) > 0 and c["tray"].get("triage", 0) > 0
    assert state_of(store, "us-east/r02/c07").state == "triage"  # slow_gpu gpu3 there
    with store.session() as s:
        rows = {r.component_id: (r.state, r.rack) for r in s.scalars(select(LifecycleRow))}
    for cid, (st, rack) in rows.items():
        if cid != rack and st == "burn_in":  # only in racks that failed for a shared part
            assert rows[rack][0] not in ("production", "degraded"), (cid, rows[rack])
    # its NVLink switch tray is down: the rack failed certification and is not serving
    assert rows["us-east/r04"][0] not in ("production", "degraded")
    assert rows["us-east/r01"][0] in ("production", "degraded")


def test_advance_to_certified_without_evidence_is_refused(env: tuple[str, str, Path]) -> None:
    db, plant, _ = env
    _ok(["lifecycle", "run", "--goal", "burn_in", "--until-idle", "--passes", "60",
         "--period", "0", "--db", db, "--plant", plant])
    assert state_of(Store(db), "us-east/r01").state == "burn_in"
    n = Store(db).count_events()
    r = runner.invoke(app, ["lifecycle", "advance", "us-east/r01", "--to", "certified",
                            "--reason", "looks fine", "--db", db, "--plant", plant])
    assert r.exit_code == 2, r.output
    assert "rackscale certify run" in r.output and "certified" in r.output
    assert state_of(Store(db), "us-east/r01").state == "burn_in"
    assert Store(db).count_events() == n
