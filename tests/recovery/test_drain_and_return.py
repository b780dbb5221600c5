"""A rack the lifecycle drained for its cooling, and slots coming back after a certified
repair, as the supervisor sees them: fake ranks (no torch), in this process, on the two-rack
topology of test_hot_rack.py. Fast: a few seconds."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rackscale.certify import loopback_placement
from rackscale.recovery import (
    JobState,
    ReturnError,
    Site,
    Supervisor,
    build_setup,
    make_job_config,
    read_returns,
    request_return,
    supervisor,
)
from tests.recovery import rig
from tests.recovery.test_hot_rack import R1, R2, RANK, TOPO


def _supervisor(job: Path, slots: list[str], cooling: Any) -> Supervisor:
    site = Site(topo=TOPO, placement=loopback_placement(slots), cooling=cooling)
    setup = build_setup(runner="lab", job_dir=job, slots=len(slots), config=None, db=None,
                        site=site)
    cfg = make_job_config(command=[sys.executable, "-c", RANK], gpus=4,
                          spares=len(slots) - 4, ckpt_every=5, stop_timeout_s=5.0)
    return Supervisor(cfg, setup)


def test_a_drained_rack_is_left_as_one_with_no_rank_slow(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No rank is slow (the response drained the rack before any straggled): the job leaves
    the rack's slots in one restart, spares from the other rack, one incident (`drain`)
    whose detection time runs from the fault's first sighting."""
    monkeypatch.setattr(supervisor, "DRAIN_POLL_S", 0.2)  # the fake job lasts ~2 s
    job, t0 = tmp_path / "job", time.time()
    slots = [R1[0], R1[1], R2[0], R2[1], R1[2], R2[2], R2[3]]
    drained = {"east/r01": {"tier": "drain", "drain": True, "since": t0 - 5.0,
                            "state": "draining"}}
    st = _supervisor(job, slots, lambda: drained if time.time() > t0 + 0.6 else {}).run()
    assert st.finished and st.attempt == 2
    assert sorted(st.excluded) == [R1[0], R1[1]]
    assert st.assignment == [R2[2], R2[3], R2[0], R2[1]] and st.spares == [R1[2]]
    (inc,) = rig.incidents(job)
    assert inc["symptom"] == "drain" and inc["component"] == "east/r01"
    assert inc["fault_kind"] == "coolant_flow_low" and inc["outcome"] == "resumed"
    assert inc["evidence"]["excluded"] == [R1[0], R1[1]]
    assert inc["evidence"]["cooling"] == drained
    assert 5.5 <= inc["detect_s"] < 30


def test_a_hot_rack_not_yet_drained_moves_no_one_by_itself(tmp_path: Path) -> None:
    job = tmp_path / "job"
    slots = [R1[0], R1[1], R2[0], R2[1], R2[2]]
    hot = {"east/r01": {"tier": "cap", "drain": False, "since": time.time()}}
    st = _supervisor(job, slots, lambda: hot).run()
    assert st.finished and st.attempt == 1 and not st.excluded and rig.incidents(job) == []


def test_a_returned_slot_becomes_a_spare_once(tmp_path: Path) -> None:
    """A slot the job excluded, returned on evidence, is a spare again; the same return is not
    taken twice, and a slot the job does not exclude is passed over."""
    job = tmp_path / "job"
    job.mkdir()
    slots = [R1[0], R1[1], R2[0], R2[1], R2[2], R2[3]]
    JobState(job="job", command=[sys.executable, "-c", RANK], gpus=4, assignment=slots[:4],
             spares=[R2[2]], excluded={R2[3]: "fail_stop of rank 1 (attempt 1)"},
             attempt=0).save(job)
    request_return(job, [R2[3], R1[2]], {"certify_run": "abc", "scope": "east/r02/c02"})
    st = _supervisor(job, slots, lambda: {}).run()
    assert st.finished and st.excluded == {} and st.spares == [R2[2], R2[3]]
    assert st.returns_read == 1
    rows = [json.loads(x) for x in (job / "incidents.jsonl").read_text().splitlines()]
    (back,) = [r["payload"] for r in rows if r["payload"].get("status") == "rejoined"]
    assert back["slots"] == [R2[3]] and "abc" in back["message"]


def test_returns_are_read_by_whole_lines(tmp_path: Path) -> None:
    request_return(tmp_path, ["a/r01/c01/gpu0"], {"certify_run": "r1"})
    with (tmp_path / "returns.jsonl").open("a") as f:
        f.write('{"slots": ["half')  # a line still being written
    (ret,) = read_returns(tmp_path)
    assert ret.slots == ("a/r01/c01/gpu0",) and ret.evidence == {"certify_run": "r1"}
    assert read_returns(tmp_path, 1) == []
    (tmp_path / "returns.jsonl").write_text('{"slots": 3}\n')
    with pytest.raises(ReturnError, match=r"returns.jsonl, line 1: not a slot return"):
        read_returns(tmp_path)
    with pytest.raises(ReturnError, match="on evidence"):
        request_return(tmp_path, ["x"], {})
