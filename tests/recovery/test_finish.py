"""Completion wins over a late straggler finding: a job whose ranks have all written `done`
at their last step is finished (exit 0, `finished: true`), whatever the detectors make of
the last steps' times, and a straggler flagged a few steps before the end is left to finish
rather than restarted on a spare."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.recovery import rig

# A rank of a job that has done all its work and takes a while to exit (process-group
# teardown, writing its result): its beats of 20 steps appear at once (written aside, then
# renamed), `done` included; rank 1's compute is 3x the others' from step 11 on, so every
# step the straggler detector scores after the warm-up flags it. Then it sleeps 2 s, exit 0.
FAKE_RANK = r"""
import json, os, sys, time
job, rank = os.environ["RACKSCALE_JOB_DIR"], int(os.environ["RANK"])
attempt = int(os.environ["RACKSCALE_ATTEMPT"])
path = os.path.join(job, "beats", f"a{attempt:03d}-r{rank:04d}.jsonl")
os.makedirs(os.path.dirname(path), exist_ok=True)
t, lines = time.time(), []
def beat(phase, step, **kw):
    lines.append(json.dumps({"phase": phase, "step": step, "t": t + len(lines) * 1e-3, **kw}))
beat("start", 0, slot=os.environ["RACKSCALE_SLOT"], pid=os.getpid())
beat("restored", 0, restore_s=0.0, ckpt=None)
for step in range(1, 21):
    beat("sync", step, compute_s=0.03 if rank == 1 and step > 10 else 0.01)
    beat("step", step, step_s=0.02)
beat("done", 20)
with open(path + ".tmp", "w") as f:
    f.write("\n".join(lines) + "\n")
os.rename(path + ".tmp", path)
time.sleep(2)
"""


def test_a_job_whose_ranks_all_wrote_done_is_finished_despite_a_late_straggler_flag(
        tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", FAKE_RANK], spares=0), job,
                         timeout_s=120)
    assert rc == 0, out
    assert out["finished"] and out["attempts"] == 1 and out["excluded"] == {}, out
    assert json.loads((job / "state.json").read_text())["finished"] is True
    assert rig.incidents(job) == []


@pytest.mark.slow
def test_a_straggler_flagged_in_the_last_steps_is_left_to_finish(tmp_path: Path) -> None:
    """A real 30-step job (checkpoints every 5); rank 1 computes 3x from step 21: flagged
    a few steps before the end (3x, not 1.5x: the flag needs five scored steps in a row,
    and on a loaded host one noisy step at 1.5x resets the count past the end). Finishing
    on it costs less than a restart (which would redo every step past the checkpoint): the
    job ends in its first attempt, nothing excluded."""
    job = tmp_path / "job"
    cmd = rig.trainer_cmd(job, "--slow-slot", "local/r01/c01/gpu1", "--slow-factor", "3",
                          "--slow-from", "21")
    rc, out = rig.finish(rig.start(job, cmd, "--steps", str(rig.STEPS)), job)
    assert rc == 0, out
    assert out["finished"] and out["attempts"] == 1 and out["excluded"] == {}, out
    assert rig.result(job)["params_sha256"] == rig.reference_digest()
    assert any("left to finish" in n for n in out["notes"]), out


# A rank of 30 steps that writes its beats as it goes (a step every 40 ms); rank 1's compute
# is 3x the others' on steps SLOW_FROM..SLOW_TO, given in argv.
PACED_RANK = r"""
import json, os, sys, time
job, rank = os.environ["RACKSCALE_JOB_DIR"], int(os.environ["RANK"])
attempt = int(os.environ["RACKSCALE_ATTEMPT"])
slow_from, slow_to = int(sys.argv[1]), int(sys.argv[2])
path = os.path.join(job, "beats", f"a{attempt:03d}-r{rank:04d}.jsonl")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "a") as f:
    def beat(phase, step, **kw):
        f.write(json.dumps({"phase": phase, "step": step, "t": time.time(), **kw}) + "\n")
        f.flush()
    beat("start", 0, slot=os.environ["RACKSCALE_SLOT"], pid=os.getpid())
    beat("restored", 0, restore_s=0.0, ckpt=None)
    for step in range(1, 31):
        slow = rank == 1 and slow_from <= step <= slow_to
        beat("sync", step, compute_s=0.03 if slow else 0.01)
        time.sleep(0.04)
        beat("step", step, step_s=0.04)
    beat("done", 30)
"""


def test_without_a_probe_a_straggler_seen_over_one_window_only_spends_no_spare(
        tmp_path: Path) -> None:
    """The local runner has no probe: a rank slow for 7 steps (flagged after 5, by its
    smoothed times) and fast again is not confirmed over a second window, so nothing is
    excluded and the job finishes, though it has no spare."""
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", PACED_RANK, "11", "17"],
                                   spares=0), job, timeout_s=120)
    assert rc == 0, out
    assert out["finished"] and out["attempts"] == 1 and out["excluded"] == {}, out


def test_without_a_probe_a_straggler_slow_over_two_windows_is_excluded(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, [sys.executable, "-c", PACED_RANK, "11", "30"],
                                   spares=0), job, timeout_s=120)
    assert rc == 2, out  # excluded, and no spare to take its rank
    assert out["error"]["kind"] == "SparesExhausted", out
    (inc,) = rig.incidents(job)
    assert inc["symptom"] == "straggler" and inc["rank"] == 1 and inc["outcome"] == "no_spare"
    assert inc["evidence"]["consecutive"] == 10 and inc["detect_steps"] == 10
