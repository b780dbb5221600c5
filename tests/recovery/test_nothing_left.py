"""Nothing a job starts outlives it: `job run` (the CLI as its own process) with two ranks and
their standbys, ended by kill -9, SIGINT, SIGTERM or its normal end; after each, no process
recorded in the job's `procs.jsonl` (by pid and start time, with its process group) runs 10 s
later. A leftover recorded there by an earlier supervisor is killed by the next start."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from rackscale import owned
from tests.recovery import rig

GONE_WITHIN_S = 10.0


def _running(job: Path) -> dict[int, str]:
    return owned.running(job / owned.RECORD, spare=owned.ancestry())


def _gone_within(job: Path, timeout_s: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    left = _running(job)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _running(job)
    return left


def _wait_for_standbys(job: Path, sup: subprocess.Popen[str]) -> dict[int, str]:
    """Once rank 0 stepped and a standby waits: what the record holds running then."""
    rig.wait_step(job, 1, 0, 2, proc=sup)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = _running(job)
        if "standby" in got.values() and list(got.values()).count("rank") >= 2:
            return got
        time.sleep(0.1)
    raise AssertionError(f"no standby started: {_running(job)}")


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM],
                         ids=["kill-9", "sigint", "sigterm"])
def test_a_signalled_supervisor_leaves_no_process_behind(tmp_path: Path,
                                                         sig: signal.Signals) -> None:
    job = tmp_path / "job"
    sup = rig.start(job, rig.trainer_cmd(job, steps=10_000), spares=1)
    try:
        before = _wait_for_standbys(job, sup)
        assert sup.pid in before and before[sup.pid] == "supervisor"
        os.kill(sup.pid, sig)  # the supervisor alone, as a user's kill or Ctrl-C would
        sup.wait(GONE_WITHIN_S)
        left = _gone_within(job, GONE_WITHIN_S)
    finally:
        owned.reap(job / owned.RECORD)  # whatever the test found left, by its recorded ids
    assert not left, f"{len(left)} of the job's processes run on after {sig.name}: {left}"


def test_a_job_that_ends_leaves_no_process_behind(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, rig.trainer_cmd(job, steps=12), spares=1), job)
    assert rc == 0, out
    roles = {o.role for o in owned.recorded(job / owned.RECORD)}
    assert {"supervisor", "rank", "standby"} <= roles  # the count below counts them
    assert not _gone_within(job, GONE_WITHIN_S)


def test_the_next_start_kills_what_an_earlier_supervisor_left(tmp_path: Path) -> None:
    """A process the earlier supervisor recorded and that outlived it (as a command that
    forks past the death signal does) is killed by its recorded id, and said."""
    job = tmp_path / "job"
    job.mkdir()
    left = subprocess.Popen(["sleep", "600"], start_new_session=True)
    owned.record(left.pid, "rank", files=str(job / owned.RECORD))
    rc, out = rig.finish(rig.start(job, rig.trainer_cmd(job, steps=6), "--cold",
                                   spares=0), job)
    assert rc == 0, out
    assert left.wait(GONE_WITHIN_S) == -signal.SIGKILL
    assert any("stopped 1 process(es) left by an earlier supervisor" in n
               for n in out["notes"]), out["notes"]


def test_a_second_supervisor_of_a_running_job_is_refused(tmp_path: Path) -> None:
    job = tmp_path / "job"
    first = rig.start(job, rig.trainer_cmd(job, steps=10_000), "--cold", spares=0)
    try:
        rig.wait_step(job, 1, 0, 1, proc=first)
        rc, out = rig.finish(rig.start(job, rig.trainer_cmd(job, steps=10_000), "--cold",
                                       spares=0), job, timeout_s=120)
        assert rc == 2 and f"supervised already (pid {first.pid}" in str(out), out
        assert first.poll() is None  # and the first one runs on, its ranks untouched
        assert list(_running(job).values()).count("rank") == 2
    finally:
        os.kill(first.pid, signal.SIGTERM)
        first.wait(GONE_WITHIN_S)
        owned.reap(job / owned.RECORD)
