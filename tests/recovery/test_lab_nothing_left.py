"""Nothing a job or a soak on the real lab starts outlives it. On the lab a rank and a standby
are forked by their launch prefix (`sh -c ... CMD`), so the kernel's parent-death signal
reaches the prefix, not them: `job run --runner lab` and `job soak` (the CLI, its own
process) are each killed with -9 while their ranks and standbys run, and no process recorded
by id in their `procs.jsonl` runs 10 s later. Root, tc and torch are needed; without them the
module fails with the reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rackscale import lab, owned
from rackscale.fleet import Topology, load_fleet
from tests.needs import require
from tests.recovery import rig

sys.path.insert(0, str(Path(__file__).parents[1] / "lab"))
from lab_rig import torch_missing

require(lab.why_not_here() or torch_missing())
pytestmark = [pytest.mark.slow]

FLEET = lab.default_fleet_path()
GONE_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def labdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    sd = tmp_path_factory.mktemp("lab") / "state"
    lab.up(Topology.build(load_fleet(FLEET)), sd, fleet_file=FLEET)
    try:
        yield sd
    finally:
        lab.down(sd)


def _running(record: Path) -> dict[int, str]:
    return owned.running(record, spare=owned.ancestry())


def _until(record: Path, done: Callable[[dict[int, str]], bool], timeout_s: float,
           proc: subprocess.Popen[str]) -> dict[int, str]:
    """Poll the record until `done(running)` holds (while `proc` runs); what runs then."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = _running(record)
        if done(got):
            return got
        assert proc.poll() is None, f"it ended early (exit {proc.returncode}): {got}"
        time.sleep(0.2)
    raise AssertionError(f"not reached in {timeout_s} s: {_running(record)}")


def _job_running(got: dict[int, str]) -> bool:
    roles = list(got.values())
    return roles.count("rank") >= 2 and "standby" in roles


def _killed_leaves_nothing(record: Path, proc: subprocess.Popen[str],
                           started: dict[int, str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)  # it alone: what it started must go without its help
    proc.wait(GONE_WITHIN_S)
    deadline = time.monotonic() + GONE_WITHIN_S
    left = _running(record)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _running(record)
    owned.reap(record)  # whatever the test found left, by its recorded ids
    assert len(started) >= 4
    assert not left, f"{len(left)} of {len(started)} processes run on after kill -9: {left}"


def test_kill9_of_a_lab_job_leaves_no_rank_or_standby(labdir: Path, tmp_path: Path) -> None:
    job = tmp_path / "job"
    sup = rig.start(job, rig.trainer_cmd(job, steps=10_000), "--runner", "lab", "--lab",
                    str(labdir), spares=1)
    started = _until(job / owned.RECORD, _job_running, 180, sup)
    _killed_leaves_nothing(job / owned.RECORD, sup, started)


def test_kill9_of_a_soak_leaves_no_supervisor_rank_standby_or_certification(
        labdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    args = [sys.executable, "-m", "rackscale", "job", "soak", "--lab", str(labdir),
            "--duration-min", "5", "--fault-count", "0", "--job-gpus", "2", "--spares", "1",
            "--out", str(out), "--db", f"sqlite:///{tmp_path / 'soak.db'}", "--json"]
    with (tmp_path / "soak.out").open("w") as log:
        soak = subprocess.Popen(args, env=rig.env(), stdout=log, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    record = out / owned.RECORD
    try:
        started = _until(record, lambda got: "supervisor" in got.values() and _job_running(
            got), 400, soak)
    except AssertionError:
        os.kill(soak.pid, signal.SIGTERM)  # the soak this test started, by its pid
        soak.wait(60)
        owned.reap(record)
        raise
    # the lab's certification ran (and its agents were recorded) before the job started
    assert {"certification", "agent"} <= {o.role for o in owned.recorded(record)}
    _killed_leaves_nothing(record, soak, started)
