"""Bad input at the command line: exit 2 with a message saying what to do, never a traceback;
checks run before anything is written; `--json` output is always valid JSON.

Real processes (`python -m rackscale`) where the behaviour involves the process itself
(exit code, stdout vs stderr, files left behind); the in-process runner elsewhere.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli._common import emit_json

runner = CliRunner()


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """A real `python -m rackscale` process (exit code, stdout/stderr, files left behind)."""
    return subprocess.run([sys.executable, "-m", "rackscale", *args], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, **(env or {})},
                          timeout=timeout)


def inproc(*args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch,
           ) -> subprocess.CompletedProcess[str]:
    """The same command in this process (much faster), run from `cwd`."""
    monkeypatch.chdir(cwd)
    res = runner.invoke(app, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return subprocess.CompletedProcess(list(args), res.exit_code, res.stdout, res.stderr)


def strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


def refused(res: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    for n in needles:
        assert n in res.stdout + res.stderr, (n, res.stdout[-2000:], res.stderr[-2000:])


def files_under(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


# ---------------------------------------------------------------- --json
def test_json_error_object_on_stdout_with_the_same_exit_code(tmp_path: Path) -> None:
    res = cli("fleet", "show", "--fleet", "nope", "--json", cwd=tmp_path)
    assert res.returncode == 2
    err = strict_json(res.stdout)["error"]  # type: ignore[index]
    assert err["exit_code"] == 2 and "built-in fleets: seed-504" in err["message"]
    res = cli("certify", "probe", "gemm", "--world", "1000000", "--json", cwd=tmp_path)
    assert res.returncode == 2
    assert strict_json(res.stdout)["error"]["kind"] == "usage"  # type: ignore[index]


def test_emit_json_never_writes_nan(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json({"a": float("nan"), "b": [float("inf"), 1.5], "c": {"d": -float("inf")}})
    assert strict_json(capsys.readouterr().out) == {"a": None, "b": [None, 1.5],
                                                    "c": {"d": None}}


def test_certify_probe_json_is_valid_json() -> None:
    res = runner.invoke(app, ["certify", "probe", "gemm", "--backend", "twin", "--json"])
    assert res.exit_code == 0, res.output
    out = strict_json(res.stdout)
    assert out["achievable_peak"] is None and out["value"] > 0  # type: ignore[index]


# ---------------------------------------------------------------- option ranges
@pytest.mark.parametrize("args,needle", [
    (["certify", "probe", "allreduce", "--world", "1000000"], "--world"),
    (["certify", "probe", "allreduce", "--size", "-5"], "--size"),
    (["certify", "run", "--fleet", "seed-504", "--seed", "-1"], "--seed"),
    (["simulate", "run", "--fleet", "seed-504", "--seed", "-3"], "--seed"),
    (["demo", "--seed", "-1"], "--seed"),
    (["lifecycle", "run", "--period", "-1"], "--period"),
    (["lifecycle", "run", "--passes", "-2"], "--passes"),
])
def test_out_of_range_options_exit_2(args: list[str], needle: str, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    res = inproc(*args, cwd=tmp_path, monkeypatch=monkeypatch)
    refused(res, needle)
    assert files_under(tmp_path) == []  # refused before anything was written


# ---------------------------------------------------------------- --out
def test_out_is_checked_before_the_ladder_runs(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "adir" / "findings.jsonl").mkdir(parents=True)  # where the findings would go
    t0 = time.perf_counter()
    res = inproc("certify", "run", "--fleet", "seed-504", "--out", "adir", cwd=tmp_path,
                 monkeypatch=monkeypatch)
    refused(res, "is a directory")
    res = inproc("certify", "run", "--fleet", "seed-504", "--out", "/proc/rackscale",
                 cwd=tmp_path, monkeypatch=monkeypatch)
    refused(res, "cannot write")
    assert files_under(tmp_path) == ["adir", "adir/findings.jsonl"]  # no database, no findings
    assert time.perf_counter() - t0 < 20  # refused at once, not after the ladder
    (tmp_path / "afile").write_text("x")
    refused(inproc("report", "build", "--out", "afile", cwd=tmp_path, monkeypatch=monkeypatch),
            "is a file")
    refused(inproc("simulate", "sweep", "--out", "/proc/rackscale", cwd=tmp_path,
                   monkeypatch=monkeypatch), "cannot write")


# ---------------------------------------------------------------- stage names
def test_stage_names_are_validated_and_shared(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for args in (["report", "build", "--stages", "nope"],
                 ["report", "show", "--stages", "nope"],
                 ["certify", "run", "--fleet", "seed-504", "--stages", "1,nope"]):
        refused(inproc(*args, cwd=tmp_path, monkeypatch=monkeypatch), "not a ladder stage",
                "multi-rack")
    db = f"sqlite:///{tmp_path}/r.db"
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    res = runner.invoke(app, ["certify", "run", "--fleet", "seed-504", "--stages",
                              "gpu,tray", "--repeats", "1", "--db", db, "--out",
                              str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    assert strict_json(res.stdout)["stages"] == [1, 2]  # type: ignore[index]
    res = runner.invoke(app, ["report", "show", "--db", db, "--stages", "2", "--json"])
    assert res.exit_code == 0, res.output
    assert strict_json(res.stdout)["job_shape"]["required_stages"] == ["tray"]  # type: ignore


def test_simulate_says_what_was_allocated() -> None:
    res = runner.invoke(app, ["simulate", "run", "--fleet", "seed-504", "--job-gpus", "100",
                              "--trials", "2",
                              "--days", "1"])
    assert res.exit_code == 0, res.output
    assert "100 GPUs requested, 144 allocated" in res.output


# ---------------------------------------------------------------- databases
def test_locked_database_gives_up_after_a_bounded_wait(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    assert cli("fleet", "load", "--fleet", "seed-504", "--db", f"sqlite:///{db}",
               cwd=tmp_path).returncode == 0
    grown = tmp_path / "grown.yaml"  # the same fleet with one more rack: a load that writes
    grown.write_text("name: seed-504\nregions:\n  - name: us-east\n    racks: [{template: "
                     "vr-nvl72, count: 5}]\n  - name: us-west\n    racks: [{template: "
                     "vr-nvl72, count: 3}]\n")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        t0 = time.perf_counter()
        res = cli("fleet", "load", "--fleet", str(grown), "--db", f"sqlite:///{db}",
                  cwd=tmp_path, env={"RACKSCALE_DB_LOCK_TIMEOUT_S": "1"}, timeout=90)
        took = time.perf_counter() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    refused(res, "is locked by another process", "RACKSCALE_DB_LOCK_TIMEOUT_S")
    assert took < 20


def test_read_only_database_is_refused_before_the_ladder(tmp_path: Path) -> None:
    """A read-only mount (root passes permission checks, so a mount is the honest test): the
    ladder must not run, and no findings file may be written."""
    dbdir = tmp_path / "db"
    dbdir.mkdir()
    url = f"sqlite:///{dbdir}/r.db"
    assert cli("fleet", "load", "--fleet", "seed-504", "--db", url, cwd=tmp_path).returncode == 0
    out = tmp_path / "findings.jsonl"
    script = (f"mount --bind -o ro {dbdir} {dbdir} && exec {sys.executable} -m rackscale "
              f"certify run --fleet seed-504 --db {url} --out {tmp_path}")
    res = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, env=dict(os.environ), timeout=120)
    refused(res, "read-only", "Nothing was written")
    assert not out.exists()


def test_non_database_file_and_bad_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is a text file, not SQLite\n" * 200)
    refused(inproc("lifecycle", "status", "--db", f"sqlite:///{junk}", cwd=tmp_path,
                   monkeypatch=monkeypatch), "not a rackscale database")
    refused(inproc("fleet", "load", "--fleet", "seed-504", "--db", f"sqlite:///{junk}",
                   cwd=tmp_path, monkeypatch=monkeypatch), "not a rackscale database")
    for url in ("postgresql+psycopg://ops:Hunter2pw@db.example:notaport/inv",
                "postgresql+psycopg://ops:Hunter2pw@127.0.0.1:99999/inv",
                "mysql://ops:Hunter2pw@127.0.0.1/inv",
                "postgresql+psycopg://ops:Hunter2pw@127.0.0.1:1/inv"):
        res = inproc("fleet", "load", "--fleet", "seed-504", "--db", url, cwd=tmp_path,
                     monkeypatch=monkeypatch)
        refused(res)
        assert "Hunter2pw" not in res.stdout + res.stderr, url


def test_read_only_commands_create_no_files(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    for args in (["lifecycle", "status"], ["lifecycle", "history", "us-east/r01"],
                 ["certify", "findings"], ["checkpoint", "ls"]):
        res = inproc(*args, cwd=tmp_path, monkeypatch=monkeypatch)
        assert "Traceback" not in res.stderr, res.stderr
        assert files_under(tmp_path) == [], args


# ---------------------------------------------------------------- damaged files
@pytest.mark.parametrize("args", [
    ["certify", "run", "--fleet", "seed-504", "--faults", "{f}"],
    ["checkpoint", "ls", "--config", "{f}"],
    ["report", "validate", "{f}"],
    ["fleet", "validate", "--fleet", "{f}"],
])
@pytest.mark.parametrize("payload", [b"faults: []\x00\x00", b"\xff\xfe\x00binary\x89PNG"])
def test_binary_input_files_exit_2(args: list[str], payload: bytes, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / ("in.json" if "report" in args else "in.yaml")
    f.write_bytes(payload)
    res = inproc(*[a.format(f=f) for a in args], cwd=tmp_path, monkeypatch=monkeypatch)
    refused(res, str(f))


def test_corrupt_plant_file_says_what_to_do(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    for garbage in (b"{not json", b"[1, 2]", b'{"power": 3}', b"\x00\x01"):
        plant = tmp_path / "plant.json"
        plant.write_bytes(garbage)
        res = inproc("lifecycle", "run", "--once", "--db", db, "--plant", str(plant),
                     cwd=tmp_path, monkeypatch=monkeypatch)
        refused(res, str(plant), "move it aside")
