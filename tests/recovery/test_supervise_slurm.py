"""`job run --runner slurm` on a real Slurm cluster on this machine (slurmctld and one slurmd
per node): kill -9 of one rank's process is detected, its node is drained with a
`rackscale:` reason, the job resumes on the spare node from the last committed checkpoint and
ends with the same parameters, bit for bit, as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.lifecycle.lc_slurm_cluster import available, slurm_cluster
from tests.needs import require
from tests.recovery import rig

pytestmark = pytest.mark.slow

NODES = ["sl-r01-c01", "sl-r01-c02", "sl-r01-c03"]  # trays sl/r01/c01.. , one GPU slot each


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    why = available()
    require(f"cannot start a Slurm test cluster here: {why}" if why else None)
    try:
        cluster = slurm_cluster(tmp_path_factory.mktemp("slurm"), NODES)
        conf = cluster.__enter__()
    except TimeoutError as err:  # slurmd could not start on this machine
        pytest.fail(f"slurmd did not start: {str(err)[:400]}", pytrace=False)
    try:
        yield conf
    finally:
        cluster.__exit__(None, None, None)


def _sinfo(conf: Path) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%T|%E"], capture_output=True,
                         text=True, check=True, env=dict(os.environ, SLURM_CONF=str(conf)))
    return {n: (st.rstrip("*"), why) for n, st, why in (
        line.split("|", 2) for line in out.stdout.splitlines())}


def test_kill9_under_slurm_drains_the_node_and_resumes_on_the_spare_bit_exact(
        slurm_conf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_conf))
    job = tmp_path / "job"
    sup = rig.start(job, rig.trainer_cmd(job), "--runner", "slurm")
    victim = rig.wait_step(job, 1, 1, 8, proc=sup)["pid"]
    os.kill(victim, signal.SIGKILL)  # the rank's own process on its node, not its srun
    killed_at = time.time()
    rc, out = rig.finish(sup, job, timeout_s=240)
    assert rc == 0, out
    assert list(out["excluded"]) == ["sl/r01/c02/gpu0"]
    assert out["assignment"] == ["sl/r01/c01/gpu0", "sl/r01/c03/gpu0"]  # the spare node
    state, reason = _sinfo(slurm_conf)["sl-r01-c02"]
    assert "drain" in state and reason.startswith("rackscale: "), (state, reason)
    assert all("drain" not in _sinfo(slurm_conf)[n][0] for n in ("sl-r01-c01", "sl-r01-c03"))
    (inc,) = rig.incidents(job)
    assert inc["symptom"] == "fail_stop" and inc["rank"] == 1
    assert inc["evidence"]["signal"] == 9 and inc["evidence"]["drained"] == "sl-r01-c02"
    assert inc["detected_at"] - killed_at < 5.0
    assert inc["ckpt_step"] >= rig.EVERY and inc["ckpt_step"] % rig.EVERY == 0
    assert rig.result(job)["resumed_from"] == inc["ckpt_id"]
    assert rig.result(job)["params_sha256"] == rig.reference_digest()
    # Every rank's Slurm job has ended with the job: none is left queued or running.
    left = subprocess.run(["squeue", "-h", "-o", "%j"], capture_output=True, text=True,
                          env=dict(os.environ), check=True).stdout.split()
    assert not [n for n in left if n.startswith(f"rackscale-{job.name}-")], left
