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


# ---------------------------------------------------------------- paths in the way
def _fleet_file(tmp_path: Path, *regions: str) -> Path:
    f = tmp_path / "fleet.yaml"
    f.write_text("name: arch\nregions:\n" + "".join(
        f"  - name: {r}\n    racks: [{{template: vr-nvl72, count: 1}}]\n" for r in regions))
    return f


def test_regions_named_like_the_archive_tier_get_working_checkpoint_commands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _fleet_file(tmp_path, "archive", "archive-tier")
    assert inproc("fleet", "validate", "--fleet", str(f), cwd=tmp_path,
                  monkeypatch=monkeypatch).returncode == 0
    assert inproc("fleet", "load", "--fleet", str(f), cwd=tmp_path,
                  monkeypatch=monkeypatch).returncode == 0
    res = inproc("checkpoint", "ls", "--json", cwd=tmp_path, monkeypatch=monkeypatch)
    assert res.returncode == 0, res.stdout + res.stderr
    from rackscale.checkpoint import default_config

    cfg = default_config("d", ["archive", "archive-tier"])
    assert cfg.archive is not None and cfg.archive.name == "archive-tier-2"


@pytest.fixture
def saved_checkpoints(tmp_path: Path) -> Path:
    """Three checkpoints in the directory default under tmp_path/rackscale-data."""
    from tests.checkpoint.test_cli import _save_three

    from rackscale.checkpoint import default_config

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        _save_three(default_config("rackscale-data"))
    finally:
        os.chdir(cwd)
    return tmp_path / "rackscale-data" / "checkpoints" / "local"


@pytest.mark.parametrize("where", ["leases/step-00000003.lock", "leases",
                                   "cache/ckpt/step-00000003/manifest.json",
                                   "cache/ckpt/step-00000003/data/w"])
def test_a_directory_or_file_in_the_way_in_the_checkpoint_store_is_exit_2(
        where: str, saved_checkpoints: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    target = saved_checkpoints / where
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    if where == "leases":
        target.write_text("")  # a file where the lease directory should be
    else:
        target.mkdir()  # a directory where a lease, manifest or data file should be
    res = inproc("checkpoint", "restore", "--json", cwd=tmp_path, monkeypatch=monkeypatch)
    refused(res, f"rackscale-data/checkpoints/local/{where}", "move it aside")
    assert strict_json(res.stdout)["error"]["kind"] == "PathInTheWay"  # type: ignore[index]


def test_checkpoint_restore_checks_out_before_restoring(
        saved_checkpoints: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("x")
    cache = saved_checkpoints / "cache" / "ckpt"
    import shutil

    shutil.rmtree(cache / "step-00000003")  # a restore would fetch it again from the region
    res = inproc("checkpoint", "restore", "--out", "afile", cwd=tmp_path,
                 monkeypatch=monkeypatch)
    refused(res, "--out afile", "is a file")
    assert not (cache / "step-00000003").exists()  # refused before anything was restored


# ---------------------------------------------------------------- job
def test_job_dir_that_is_a_file_or_missing_is_exit_2(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "afile").write_text("x")
    refused(inproc("job", "run", "--gpus", "1", "--job-dir", "afile", "--", "true",
                   cwd=tmp_path, monkeypatch=monkeypatch), "--job-dir afile", "is a file")
    refused(inproc("job", "incidents", "--job-dir", "afile", cwd=tmp_path,
                   monkeypatch=monkeypatch), "--job-dir afile", "is a file")
    refused(inproc("job", "incidents", "--job-dir", str(tmp_path / "nonexistent"),
                   cwd=tmp_path, monkeypatch=monkeypatch), "nonexistent", "no such directory")
    assert files_under(tmp_path) == ["afile"]


def test_job_run_records_in_the_default_store_and_incidents_says_where_it_looked(
        tmp_path: Path) -> None:
    res = cli("job", "run", "--gpus", "1", "--", sys.executable, "-c", "import sys; sys.exit(3)",
              cwd=tmp_path, env={"RACKSCALE_DB": ""})
    refused(res, "failed on every rank")
    from rackscale.store import Store

    store = Store(f"sqlite:///{tmp_path}/rackscale-data/rackscale.db", readonly=True)
    try:
        assert [e.component_id for e in store.events()] == ["job/job"] * len(store.events())
        assert store.events(), "job run recorded nothing in the default store"
    finally:
        store.close()
    res = cli("job", "incidents", cwd=tmp_path, env={"RACKSCALE_DB": ""})
    assert res.returncode == 0, res.stderr
    assert "no recovery incidents in the store sqlite:///rackscale-data/rackscale.db" in \
        res.stdout and "rackscale job run --job-gpus 2 --spares 1" in res.stdout
    res = cli("job", "incidents", "--job-dir", "rackscale-data/jobs/job", cwd=tmp_path)
    assert "no recovery incidents in rackscale-data/jobs/job/incidents.jsonl" in res.stdout


def test_job_run_help_shows_the_command_after_the_double_dash() -> None:
    res = runner.invoke(app, ["job", "run", "--help"])
    assert res.exit_code == 0 and "-- CMD" in res.output


# ---------------------------------------------------------------- markup in paths
def test_markup_in_an_out_path_is_printed_as_written(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert inproc("fleet", "load", "--fleet", "seed-504", cwd=tmp_path,
                  monkeypatch=monkeypatch).returncode == 0
    for args, shown in ((["report", "build", "--out", "[/]x[bold]y"], "[/]x[bold]y/report.json"),
                        (["report", "validate", "[/]x[bold]y/report.json"],
                         "ok [/]x[bold]y/report.json"),
                        (["certify", "plan", "--fleet", "seed-504", "--k8s", "--out", "[/]p"],
                         "to [/]p, rendered"),
                        (["simulate", "sweep", "--fleet", "seed-504", "--trials", "2", "--days",
                          "1", "--values", "10,20", "--out", "[/]s[red]"],
                         "wrote [/]s[red]/sweep-ckpt-interval.csv")):
        res = inproc(*args, cwd=tmp_path, monkeypatch=monkeypatch)
        assert res.returncode == 0, (args, res.stdout[-2000:], res.stderr[-2000:])
        assert shown in res.stdout.replace("\n", ""), (args, res.stdout[-2000:])


# ---------------------------------------------------------------- bounded options
@pytest.mark.parametrize("args,needle", [
    (["simulate", "run", "--fleet", "seed-504", "--straggler-ratio", "1e300"],
     "straggler-ratio"),
    (["simulate", "run", "--fleet", "seed-504", "--days", "1e6"], "days"),
    (["simulate", "sweep", "--fleet", "seed-504", "--days", "1e6"], "days"),
])
def test_unbounded_simulation_options_are_refused(args: list[str], needle: str,
                                                  tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.perf_counter()
    refused(inproc(*args, cwd=tmp_path, monkeypatch=monkeypatch), needle)
    assert time.perf_counter() - t0 < 20


def test_report_build_refuses_a_huge_price_and_leaves_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    for price in ("1e308", "1e7"):
        refused(inproc("report", "build", "--db", db, "--out", "rep", "--gpu-hour-price", price,
                       cwd=tmp_path, monkeypatch=monkeypatch), "--gpu-hour-price", "1,000,000")
    assert not (tmp_path / "rep").exists()  # no evidence/ left behind


# ---------------------------------------------------------------- operator text
def test_control_characters_in_a_reason_are_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    assert runner.invoke(app, ["lifecycle", "run", "--once", "--db", db,
                               "--plant", str(tmp_path / "plant.json")]).exit_code == 0
    for reason in ("ok\x00nul", "title\x1b]0;pwned\x07", "two\nlines"):
        refused(inproc("lifecycle", "drain", "us-east/r01/c01", "--reason", reason, "--db", db,
                       cwd=tmp_path, monkeypatch=monkeypatch), "--reason", "control characters")
        refused(inproc("lifecycle", "advance", "us-east/r01", "--to", "cabled", "--reason",
                       reason, "--db", db, "--plant", str(tmp_path / "plant.json"),
                       cwd=tmp_path, monkeypatch=monkeypatch), "control characters")
    res = inproc("lifecycle", "history", "us-east/r01/c01", "--db", db, "--json", cwd=tmp_path,
                 monkeypatch=monkeypatch)
    assert not any(e["kind"] == "lifecycle.transition" and e["payload"].get("to") == "triage"
                   for e in strict_json(res.stdout))  # type: ignore[union-attr]


def test_lifecycle_history_shows_control_characters_escaped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reason stored before the check (or by another writer) never drives the terminal."""
    from rackscale.lifecycle.repository import transition
    from rackscale.store import Store

    db = f"sqlite:///{tmp_path}/r.db"
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    assert runner.invoke(app, ["lifecycle", "run", "--once", "--db", db,
                               "--plant", str(tmp_path / "plant.json")]).exit_code == 0
    store = Store(db)
    try:
        transition(store, "us-east/r01", "cabled", actor="old-writer",
                   reason="x\x1b]0;pwned\x07\x1b[2J")
    finally:
        store.close()
    res = inproc("lifecycle", "history", "us-east/r01", "--db", db, cwd=tmp_path,
                 monkeypatch=monkeypatch)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout
    assert "x\\x1b]0;pwn" in res.stdout  # shown, escaped (the cell may be cut short)
