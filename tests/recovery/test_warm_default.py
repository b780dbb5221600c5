"""Warm standbys are `job run`'s default: a restart hands the ranks to standby processes of a
command that takes part, `--cold` starts them afresh, a command that does not take part is
never run as a standby, and a runner that cannot keep standbys (Slurm) runs cold and refuses
`--warm`. Fake ranks without torch: a few seconds each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli.job import _warm
from rackscale.recovery import make_job_config
from rackscale.recovery.warm import takes_part
from tests.recovery import rig

# A rank of 12 steps that takes part in the standby protocol (wait_for_rank after its
# imports). In attempt 1, rank 1 dies (exit 1) at step 5; with argv[1] == "1" it first waits
# for the job's three standbys to be ready (before its start beat: the start-up timeout
# covers the wait), so the restart finds them.
WARM_RANK = r"""
import json, os, sys, time
from rackscale.recovery.warm import wait_for_rank
wait_for_rank()
job, rank = os.environ["RACKSCALE_JOB_DIR"], int(os.environ["RANK"])
attempt = int(os.environ["RACKSCALE_ATTEMPT"])
if attempt == 1 and rank == 1 and sys.argv[1] == "1":
    deadline = time.time() + 120
    while len([p for p in os.listdir(os.path.join(job, "warm")) if p.endswith(".ready")]) < 3:
        if time.time() > deadline:
            break
        time.sleep(0.05)
path = os.path.join(job, "beats", f"a{attempt:03d}-r{rank:04d}.jsonl")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "a") as f:
    def beat(phase, step, **kw):
        f.write(json.dumps({"phase": phase, "step": step, "t": time.time(), **kw}) + "\n")
        f.flush()
    beat("start", 0, slot=os.environ["RACKSCALE_SLOT"], pid=os.getpid())
    beat("restored", 0, restore_s=0.0, ckpt=None)
    for step in range(1, 13):
        if attempt == 1 and rank == 1 and step == 5:
            os._exit(1)
        beat("sync", step, compute_s=0.01)
        time.sleep(0.05)
        beat("step", step, step_s=0.05)
    beat("done", 12)
"""

# The same job's rank without wait_for_rank: run as a standby, it would run as no rank.
PLAIN_RANK = WARM_RANK.replace("from rackscale.recovery.warm import wait_for_rank\n"
                               "wait_for_rank()\n", "")


def _start_pids(job: Path, attempt: int) -> set[int]:
    return {rig.beats(job, attempt, r)[0]["pid"] for r in (0, 1)}


def test_by_default_the_restart_runs_in_standbys(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", WARM_RANK, "1"]), job,
                         timeout_s=240)
    assert rc == 0, out
    assert out["attempts"] == 2 and list(out["excluded"]) == ["local/r01/c01/gpu1"], out
    (inc,) = rig.incidents(job)
    assert inc["symptom"] == "fail_stop" and inc["outcome"] == "resumed"
    # Attempt 2's ranks are processes that were waiting as standbys, not fresh starts.
    standbys = {int(p.read_text()) for p in (job / "warm").glob("*.ready")}
    assert _start_pids(job, 2) <= standbys, (_start_pids(job, 2), standbys)
    assert not list((job / "logs").glob("a002-*.log"))
    assert not any(map(rig.pid_alive, standbys))  # none outlives the job


def test_cold_starts_the_restart_afresh(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", WARM_RANK, "0"], "--cold"),
                         job, timeout_s=240)
    assert rc == 0, out
    assert out["attempts"] == 2, out
    # no standby was started: warm/ holds only the ranks' word that they could take part
    assert [p.name for p in (job / "warm").iterdir()] == ["supported"]
    assert {p.name for p in (job / "logs").glob("a002-*.log")} == {"a002-r0000.log",
                                                                   "a002-r0001.log"}


def test_a_command_that_does_not_take_part_is_never_run_as_a_standby(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", PLAIN_RANK, "0"]), job,
                         timeout_s=240)
    assert rc == 0, out
    assert out["attempts"] == 2, out  # recovered, cold
    assert not list((job / "warm").glob("w*"))  # no standby (nor a warm/ at all)
    said = [n for n in out["notes"] if "no standby processes" in n]
    assert len(said) == 1 and "wait_for_rank()" in said[0], out["notes"]


def test_the_default_resolves_per_runner_and_slurm_refuses_warm(tmp_path: Path) -> None:
    assert make_job_config(command=["x"], gpus=1).warm is True
    assert _warm("local", None) and _warm("lab", None) and not _warm("slurm", None)
    assert not _warm("local", False) and not _warm("slurm", False)
    res = CliRunner().invoke(app, ["job", "run", "--runner", "slurm", "--warm", "--job-gpus",
                                   "1", "--job-dir", str(tmp_path / "job"), "--", "true"])
    assert res.exit_code == 2, res.output
    assert "--warm with --runner slurm" in res.output and "drop --warm" in res.output
    run = typer.main.get_command(app).commands["job"].commands["run"]  # type: ignore[attr-defined]
    (flag,) = [p for p in run.params if p.name == "warm"]
    assert flag.secondary_opts == ["--cold"] and flag.default is None  # resolved per runner
    assert "warm with --runner local and lab, cold with slurm" in flag.help


@pytest.mark.parametrize("command,known", [
    (["rackscale", "job", "train-demo", "--steps", "3"], True),
    (["/venv/bin/rackscale", "job", "train-demo"], True),
    ([sys.executable, "-m", "rackscale", "job", "train-demo"], True),
    ([sys.executable, "-m", "rackscale.recovery.trainer", "--steps", "3"], True),
    (["rackscale", "job", "incidents"], False),
    ([sys.executable, "train.py"], False),
    (["torchrun", "-m", "rackscale.recovery.trainer"], False),
    (["sh"], False),
])
def test_only_rackscale_s_own_trainer_is_known_to_take_part(command: list[str],
                                                           known: bool) -> None:
    assert takes_part(command) is known


def test_the_marker_is_written_by_a_supervised_rank_only(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from rackscale.recovery.warm import SUPPORTED, WARM_ENV, wait_for_rank

    monkeypatch.delenv(WARM_ENV, raising=False)
    monkeypatch.delenv("RACKSCALE_JOB_DIR", raising=False)
    wait_for_rank()  # alone, not under the supervisor: nothing to say, nowhere
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("RACKSCALE_JOB_DIR", str(tmp_path))
    wait_for_rank()
    assert json.loads((tmp_path / "warm" / SUPPORTED).read_text()) > 0
