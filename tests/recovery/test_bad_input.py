"""Bad input to `rackscale job run`: a clear message, exit 2, and no checkpoint lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rackscale.checkpoint import Tiers, load_config
from rackscale.recovery import latest_committed
from tests.recovery import rig


def _run(job: Path, *args: str, cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rackscale", "job", "run", "--job-dir",
                           str(job), *args, "--json", "--", *cmd], env=rig.env(),
                          capture_output=True, text=True, timeout=300, cwd=job.parent)


def _error(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    return json.loads(p.stdout)["error"]["message"]


def test_a_command_that_does_not_exist_is_refused_before_any_rank(tmp_path: Path) -> None:
    msg = _error(_run(tmp_path / "job", "--gpus", "2", cmd=["no-such-trainer", "--x"]))
    assert "'no-such-trainer' was not found" in msg
    assert not (tmp_path / "job" / "logs").exists()  # nothing was launched


def test_an_unknown_runner_lists_the_valid_ones_and_the_lab_runner_needs_a_lab(
        tmp_path: Path) -> None:
    msg = _error(_run(tmp_path / "job", "--runner", "nope", "--gpus", "1", cmd=["true"]))
    assert "unknown runner 'nope'" in msg and "local, lab, slurm" in msg
    msg = _error(_run(tmp_path / "job", "--runner", "lab", "--lab", str(tmp_path / "none"),
                      "--gpus", "1", cmd=["true"]))
    assert "no lab is recorded in" in msg and "rackscale lab up" in msg


def test_a_command_failing_on_every_rank_excludes_no_gpu(tmp_path: Path) -> None:
    job = tmp_path / "job"
    msg = _error(_run(job, "--gpus", "2", "--spares", "1",
                      cmd=[sys.executable, "-c", "import sys; print('bad flag'); sys.exit(3)"]))
    assert "failed on every rank before its first step" in msg and "bad flag" in msg
    state = json.loads((job / "state.json").read_text())
    assert state["excluded"] == {} and state["spares"] == ["local/r01/c01/gpu2"]


def test_an_unreachable_checkpoint_store_is_exit_2(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there
    cfg = {"local_dir": str(tmp_path / "local"),
           "region": {"name": "r", "kind": "s3", "endpoint": f"http://127.0.0.1:{port}",
                      "bucket": "b", "access_key": "k", "secret_key": "s", "timeout_s": 1}}
    (tmp_path / "tiers.json").write_text(json.dumps(cfg))
    msg = _error(_run(tmp_path / "job", "--gpus", "1", "--config", str(tmp_path / "tiers.json"),
                      cmd=rig.trainer_cmd(tmp_path / "job")))
    assert f"127.0.0.1:{port}" in msg
    assert not (tmp_path / "job" / "logs").exists()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_more_exclusions_than_spares_stops_with_exit_2_and_keeps_checkpoints(
        tmp_path: Path) -> None:
    job = tmp_path / "job"
    sup = rig.start(job, rig.trainer_cmd(job), spares=0)
    victim = rig.wait_step(job, 1, 1, 8, proc=sup)["pid"]
    os.kill(victim, signal.SIGKILL)
    rc, out = rig.finish(sup, job)
    assert rc == 2, out
    assert "no spare is left" in out["error"]["message"]
    tiers = Tiers(load_config(job / "tiers.json"))
    ckpt, step = latest_committed(tiers)
    assert ckpt is not None and step >= 5
    assert ckpt in out["error"]["message"]
    assert rig.incidents(job)[0]["outcome"] == "no_spare"
    assert not rig.pid_alive(victim)


def test_short_of_spares_the_job_waits_for_a_repaired_slot_to_rejoin(tmp_path: Path) -> None:
    """With --spare-wait-s a recovery short of spares waits for a returned slot instead of
    stopping: the second crash finds no spare, the first crash's slot is returned on evidence
    during the wait, and the job goes on on it."""
    from rackscale.recovery import JobState, request_return

    job = tmp_path / "job"
    sup = rig.start(job, rig.trainer_cmd(job), "--spare-wait-s", "120", spares=1)
    try:
        os.kill(rig.wait_step(job, 1, 1, 8, proc=sup)["pid"], signal.SIGKILL)
        os.kill(rig.wait_step(job, 2, 1, 8, proc=sup)["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # both crashes excluded: the job now waits
            st = JobState.load(job)
            if st is not None and len(st.excluded) == 2:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"the job never showed both exclusions: {st}")
        first = next(iter(st.excluded))
        request_return(job, [first], {"certify": "passed after repair (test)"})
        rig.wait_step(job, 3, 1, 8, proc=sup)
        st = JobState.load(job)
        assert st is not None and first in st.assignment and first not in st.excluded
    finally:
        os.killpg(sup.pid, signal.SIGTERM)
        sup.wait(30)
