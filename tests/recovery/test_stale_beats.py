"""Heartbeats belong to one attempt: beats another run left in a job directory (used again
after its state was moved away, or copied from a running job) are never taken for the running
attempt's. Real supervised jobs (`job run`, two ranks of the reference trainer)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

from rackscale import owned
from rackscale.recovery import BeatReader, HeartbeatWriter, JobState
from tests.recovery import rig


def _stale(job: Path, attempt: int, rank: int, lines: list[tuple[str, int]], t0: float) -> None:
    p = job / "beats" / f"a{attempt:03d}-r{rank:04d}.jsonl"
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as f:
        for i, (phase, step) in enumerate(lines):
            f.write(json.dumps({"phase": phase, "step": step, "t": t0 + i,
                                "run": "0ther0run000"}) + "\n")


def test_a_reused_job_directory_s_stale_beats_spend_no_spare(tmp_path: Path) -> None:
    """A directory whose state was moved away holds the beats of the earlier run's attempt 1:
    rank 0's say it is done, rank 1's stop an hour ago (a hang, if believed)."""
    job = tmp_path / "job"
    t0 = time.time() - 3600
    _stale(job, 1, 0, [("start", 0), ("restored", 0), ("step", 1), ("step", 2), ("done", 2)],
           t0)
    _stale(job, 1, 1, [("start", 0), ("restored", 0), ("step", 1), ("step", 2)], t0)
    rc, out = rig.finish(rig.start(job, rig.trainer_cmd(job, steps=8), "--cold"), job)
    assert rc == 0, out
    assert out["excluded"] == {} and len(out["spares_left"]) == 1 and out["attempts"] == 1
    assert rig.incidents(job) == []
    assert rig.result(job)["steps"] == 8  # it trained, not finished on the stale `done`
    (away,) = (job / "beats").glob("stale-*")  # kept, not deleted
    assert sorted(p.name for p in away.iterdir()) == ["a001-r0000.jsonl", "a001-r0001.jsonl"]
    assert any("moved to" in n for n in out["notes"])
    fresh = rig.beats(job, 1, 1)
    assert fresh and all(b["t"] > t0 + 3000 for b in fresh)


def test_a_copied_running_job_directory_leaves_the_original_alone(tmp_path: Path) -> None:
    """A copy of a running job's directory (its state names the original's ranks, its record
    the original's supervisor): the copy runs as a job of its own, the original's processes
    are neither stopped nor counted, and no spare is spent."""
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    cmd = rig.trainer_cmd(orig, steps=10_000)
    first = rig.start(orig, cmd, "--cold")
    second = None
    try:
        rig.wait_step(orig, 1, 0, 3, proc=first)
        shutil.copytree(orig, copy)
        ranks = [r.pid for r in (JobState.load(copy) or JobState.load(orig)).rank_pids]
        # the original's next attempt, as a copy taken a moment later would hold it
        _stale(copy, 2, 1, [("start", 0), ("restored", 0), ("step", 1), ("step", 2)],
               time.time() - 600)
        second = rig.start(copy, cmd, "--cold")  # the same command: it resumes the copy
        rig.wait_step(copy, 2, 1, 4, proc=second)
        assert first.poll() is None and all(map(rig.pid_alive, ranks)), "original harmed"
        st = JobState.load(copy)
        assert st is not None and st.attempt == 2 and st.excluded == {} and len(st.spares) == 1
        # a job of its own: not the original's identity, so not its checkpoints' key space
        original = JobState.load(orig)
        assert original is not None and st.job_id and st.job_id != original.job_id
        assert rig.incidents(copy) == []
        mine = owned.running(copy / owned.RECORD, spare=owned.ancestry())
        assert second.pid in mine and first.pid not in mine
        assert not set(ranks) & set(mine)
    finally:
        for p in (second, first):
            if p is not None:
                os.kill(p.pid, signal.SIGTERM)
                p.wait(20)
        for d in (copy, orig):
            owned.reap(d / owned.RECORD)


def test_the_reader_passes_over_another_run_s_lines_in_the_attempt_s_file(
        tmp_path: Path) -> None:
    w = HeartbeatWriter(tmp_path / "beats" / "a001-r0000.jsonl", run="mine")
    other = HeartbeatWriter(tmp_path / "beats" / "a001-r0000.jsonl", run="theirs")
    other.beat("step", 7)
    other.beat("done", 7)
    w.beat("start", 0)
    w.beat("step", 1)
    for h in (w, other):
        h.close()
    reader = BeatReader(tmp_path, 1, 1, run="mine")
    (rb,) = reader.poll()
    assert (rb.done, rb.done_step, rb.steps_seen, reader.foreign) == (False, 1, 1, 2)
    (all_,) = BeatReader(tmp_path, 1, 1).poll()  # without an id every line counts
    assert all_.done
