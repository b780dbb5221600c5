"""The soak's figures from a job directory written by hand: the kept steps, ETTR and its
interval, and badput by cause adding up to the wall time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackscale.soak import BADPUT_CAUSES, figures

GPUS = 2


def _beats(job: Path, attempt: int, steps: range, t0: float, dt: float) -> None:
    for rank in range(GPUS):
        p = job / "beats" / f"a{attempt:03d}-r{rank:04d}.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("a") as f:
            f.write(json.dumps({"phase": "start", "step": 0, "t": t0 - 1}) + "\n")
            for i, s in enumerate(steps):
                f.write(json.dumps({"phase": "step", "step": s, "t": t0 + i * dt}) + "\n")


def _job(tmp_path: Path) -> tuple[Path, list[dict]]:
    """Attempt 1: steps 1..34 from t=2 every 0.25 s; a kill at 10.3, decided at 10.4; the
    job resumes from step 30 and runs steps 31..70 from t=15.4."""
    job = tmp_path / "job"
    _beats(job, 1, range(1, 35), 2.0, 0.25)
    _beats(job, 2, range(31, 71), 15.4, 0.25)
    inc = {"job": "j", "attempt": 1, "symptom": "fail_stop", "rank": 1,
           "component": "lab/r01/c01/gpu1", "fault_kind": "gpu_dead", "detected_at": 10.4,
           "stop_s": 0.5, "localize_s": 0.0, "restore_s": 1.0, "downtime_s": 5.0,
           "first_step_s": 4.0, "ckpt_step": 30, "work_lost_steps": 4, "outcome": "resumed"}
    (job / "incidents.jsonl").write_text(json.dumps({"kind": "recovery.incident",
                                                     "payload": inc}) + "\n")
    fault = {"index": 0, "cause": "faulty GPU", "action": "kill",
             "component": "lab/r01/c01/gpu1", "slot": "lab/r01/c01/gpu1",
             "injected_at": 10.3, "lifted_at": 40.3}
    return job, [fault]


def test_kept_steps_ettr_and_badput_add_up_to_the_wall_time(tmp_path: Path) -> None:
    job, faults = _job(tmp_path)
    r = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=26.0, faults=faults)
    assert (r["steps_completed"], r["steps_kept"], r["steps_lost"]) == (74, 70, 4)
    assert r["clean_step_s"] == pytest.approx(0.25)
    assert r["ettr"]["value"] == pytest.approx(70 * 0.25 / 26, abs=1e-4)
    assert r["ettr"]["lo"] <= r["ettr"]["value"] <= r["ettr"]["hi"]
    b = r["badput_s"]
    assert list(b) == list(BADPUT_CAUSES)
    assert b["initial_start"] == pytest.approx(1.75)
    assert b["detection"] == pytest.approx(0.1)
    assert (b["stop"], b["restore"]) == (0.5, 1.0)
    assert b["restart"] == pytest.approx(5.0 - 0.5 - 1.0 - 0.25)
    assert b["lost_work"] == pytest.approx(1.0)
    assert b["other"] == pytest.approx(0.9, abs=1e-3)  # after the last step, and before the kill
    assert sum(b.values()) + 70 * 0.25 == pytest.approx(26.0)
    (f,) = r["faults"]
    assert f["detected"] and f["time_to_detect_s"] == pytest.approx(0.1)
    assert f["named_vs_injected"] == "exact" and f["recovered"]
    assert r["goodput"]["of_slots"]["value"] == pytest.approx(r["ettr"]["value"] / 2, abs=1e-4)


def test_a_fault_no_one_detected_runs_degraded_until_lifted(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _beats(job, 1, range(1, 21), 1.0, 0.25)  # to t=5.75
    _beats(job, 1, range(21, 31), 6.0, 0.5)  # a slow part from t=5.75 to t=10.5
    fault = {"index": 0, "cause": "network switch/cable", "action": "leaf_degraded",
             "component": "lab/leaf0", "slot": "lab/r01/c01/gpu0", "injected_at": 5.75,
             "lifted_at": 10.5}
    r = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=10.5, faults=[fault])
    (f,) = r["faults"]
    assert not f["detected"] and f["named_vs_injected"] == "not detected"
    # 4.75 s running, 10 steps done worth 2.5 s: 2.25 s degraded
    assert f["badput_s"]["running_degraded"] == pytest.approx(2.25)


def test_too_few_clean_steps_is_said(tmp_path: Path) -> None:
    job = tmp_path / "job"
    _beats(job, 1, range(1, 4), 1.0, 0.25)
    with pytest.raises(ValueError, match="clean step"):
        figures(job_dir=job, gpus=GPUS, spares=0, t_launch=0.0, t_end=5.0, faults=[])


def test_a_cooling_fault_named_by_its_rack_is_said_so() -> None:
    from rackscale.soak.measure import _named

    fault = {"component": "lab/r01/cdu", "slot": "lab/r01/c01/gpu0", "rack": "lab/r01"}
    assert _named(fault, {"component": "lab/r01"}) == "its rack"
    assert _named(fault, {"component": "lab/r02"}) == "other part"
    assert _named({"component": "lab/r01/c01/nic0", "slot": "x"},
                  {"component": "lab/r01"}) == "other part"


def test_the_saves_time_is_its_own_cause_not_other(tmp_path: Path) -> None:
    """Steps 10, 20 and 30 of attempt 1 saved (0.2 s on rank 0, 0.3 s on rank 1): 0.9 s of
    `checkpoint`, taken from `other`; a save only one rank reported (step 31, attempt 2,
    never completed by both) does not count."""
    job, faults = _job(tmp_path)
    plain = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=26.0,
                    faults=faults)["badput_s"]
    for rank, cost in ((0, 0.2), (1, 0.3)):
        with (job / "beats" / f"a001-r{rank:04d}.jsonl").open("a") as f:
            for s in (10, 20, 30):
                f.write(json.dumps({"phase": "step", "step": s, "t": 2.0 + (s - 1) * 0.25,
                                    "saved_s": cost}) + "\n")
    with (job / "beats" / "a002-r0000.jsonl").open("a") as f:
        f.write(json.dumps({"phase": "step", "step": 31, "t": 15.4, "saved_s": 5.0}) + "\n")
    b = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=26.0,
                faults=faults)["badput_s"]
    assert b["checkpoint"] == pytest.approx(0.9) and plain["checkpoint"] == 0
    assert b["other"] == pytest.approx(plain["other"] - 0.9, abs=1e-3)


def test_a_save_inside_a_degraded_window_is_counted_once(tmp_path: Path) -> None:
    """A slow part from t=5.75 to 10.5 (as above), and a 1 s save at step 25 inside that
    window: the save is `checkpoint`, not running degraded as well."""
    job = tmp_path / "job"
    _beats(job, 1, range(1, 21), 1.0, 0.25)
    _beats(job, 1, range(21, 31), 6.0, 0.5)
    for rank in range(GPUS):
        with (job / "beats" / f"a001-r{rank:04d}.jsonl").open("a") as f:
            f.write(json.dumps({"phase": "step", "step": 25, "t": 8.0, "saved_s": 1.0}) + "\n")
    fault = {"index": 0, "cause": "network switch/cable", "action": "leaf_degraded",
             "component": "lab/leaf0", "slot": "lab/r01/c01/gpu0", "injected_at": 5.75,
             "lifted_at": 10.5}
    r = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=10.5, faults=[fault])
    (f,) = r["faults"]
    assert r["badput_s"]["checkpoint"] == pytest.approx(1.0)
    assert f["badput_s"]["running_degraded"] == pytest.approx(2.25 - 1.0)
    assert sum(r["badput_s"].values()) + 30 * 0.25 == pytest.approx(10.5)


def test_the_clean_step_counts_every_attempt_outside_the_faults(tmp_path: Path) -> None:
    """Attempt 1 runs 0.4 s steps (a slow start) until a kill at 10.3; the spares' attempt 2
    runs 50 steps of 0.25 s after the fault is lifted at 15. The clean step pools both
    attempts' fault-free steps (a unit from attempt 1 alone, 0.4 s, made `other` negative),
    and a save is not part of a clean step."""
    job = tmp_path / "job"
    _beats(job, 1, range(1, 24), 1.0, 0.4)  # to t=9.8
    _beats(job, 2, range(21, 71), 16.0, 0.25)  # to t=28.25
    for rank in range(GPUS):  # step 40 of attempt 2 ends with a 0.1 s save
        with (job / "beats" / f"a002-r{rank:04d}.jsonl").open("a") as f:
            f.write(json.dumps({"phase": "step", "step": 40, "t": 16.0 + 19 * 0.25,
                                "saved_s": 0.1}) + "\n")
    fault = {"index": 0, "cause": "faulty GPU", "action": "kill", "component": "lab/r01/c01/gpu1",
             "slot": "lab/r01/c01/gpu1", "injected_at": 10.3, "lifted_at": 15.0}
    r = figures(job_dir=job, gpus=GPUS, spares=2, t_launch=0.0, t_end=28.5, faults=[fault])
    assert r["clean_step_s"] == pytest.approx(0.25)
    b = r["badput_s"]
    assert b["other"] >= 0, b
    assert sum(b.values()) + r["steps_kept"] * r["clean_step_s"] == pytest.approx(28.5)
