"""The checkpoint interval from evidence: without --ckpt-every a job's ranks save at
sqrt(2 x measured save cost x MTBF) (Young/Daly), all on the same steps, and the supervisor
says the interval with its inputs; --ckpt-every still sets it. Real supervised jobs (two
ranks of the reference trainer)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rackscale.recovery.cadence import FIRST_SAVE_STEPS, Cadence, young_daly_s
from tests.recovery import rig


def _saved_steps(job: Path, rank: int) -> list[int]:
    return [b["step"] for b in rig.beats(job, 1, rank) if b["phase"] == "step" and "saved_s" in b]


def test_young_daly_is_the_root_of_twice_cost_times_mtbf() -> None:
    assert young_daly_s(0.5, 3600) == pytest.approx(60.0)
    with pytest.raises(ValueError):
        young_daly_s(0.0, 3600)
    c = Cadence(mtbf_s=100.0, mtbf_from="test")
    assert [c.due(now=0) for _ in range(FIRST_SAVE_STEPS)][-2:] == [False, True]
    c.saved(0.5, 0.1, FIRST_SAVE_STEPS)
    assert c.interval_s == pytest.approx(10.0)
    assert not c.due(now=c.last_save_t + 9.9) and c.due(now=c.last_save_t + 10.0)


def test_without_ckpt_every_the_interval_comes_from_the_save_cost_and_the_mtbf(
        tmp_path: Path) -> None:
    job = tmp_path / "job"
    # A short MTBF (36 s) so that a 40-step job saves several times at its chosen interval.
    proc = rig.start(job, rig.trainer_cmd(job, steps=40), "--cold", "--mtbf-h", "0.01",
                     spares=0, ckpt_every=None)
    rc, out = rig.finish(proc, job)
    assert rc == 0, out
    d = json.loads((job / "cadence.json").read_text())
    assert d["mtbf_s"] == pytest.approx(36.0) and d["mtbf_from"] == "--mtbf-h"
    assert d["interval_s"] == pytest.approx(math.sqrt(2 * d["save_cost_s"] * 36.0), rel=1e-3)
    saved = _saved_steps(job, 0)
    assert saved[0] == FIRST_SAVE_STEPS and len(saved) >= 2
    assert saved == _saved_steps(job, 1)  # every rank saved the same steps
    said = [n for n in out["notes"] if "sqrt(2 x save cost" in n]
    assert said and "MTBF 36.0 s" in said[0] and "--mtbf-h" in said[0], out["notes"]


def test_ckpt_every_still_sets_the_interval(tmp_path: Path) -> None:
    job = tmp_path / "job"
    rc, out = rig.finish(rig.start(job, rig.trainer_cmd(job, steps=13), "--cold",
                                   "--mtbf-h", "0.01", spares=0, ckpt_every=4), job)
    assert rc == 0, out
    assert _saved_steps(job, 0) == [4, 8, 12] and not (job / "cadence.json").exists()
