"""`job soak`'s words for a person: every fault's recertification and each rack's lifecycle
path are said, from a real soak's soak.json with those parts added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackscale.cli.job import _recertified, _say_soak

SOAK = Path(__file__).parent / "data" / "soak1" / "soak.json"


def test_the_soak_says_recertifications_and_rack_paths(
        capsys: pytest.CaptureFixture[str]) -> None:
    r = json.loads(SOAK.read_text())
    r["event_seq"] = 7
    r["faults"][0]["recertified"] = {"passed": True, "scope": "lab/r01/c02",
                                     "returned": ["lab/r01/c02/gpu1"]}
    r["faults"][1]["recertified"] = {"passed": False, "scope": "lab/r02/c01",
                                     "why": "lab/r02/c01/gpu0 slow_gpu", "returned": []}
    r["lifecycle"] = {"transitions": [
        {"rack": "lab/r01", "from": None, "to": "production"},
        {"rack": "lab/r02", "from": None, "to": "production"},
        {"rack": "lab/r01", "from": "production", "to": "draining"},
        {"rack": "lab/r01", "from": "draining", "to": "production"}]}
    assert _recertified(r["faults"][0]) == "lab/r01/c02 passed, 1 slot(s) back"
    assert _recertified(r["faults"][1]) == "lab/r02/c01 failed (lab/r02/c01/gpu0 slow_gpu)"
    assert _recertified(r["faults"][2]) == "-"
    _say_soak(r)  # the table's cells wrap at the captured width; the lines below do not
    out = " ".join(capsys.readouterr().out.split())
    assert "lifecycle of lab/r01 (plant simulated): production -> draining -> production" in out
    assert "lifecycle of lab/r02" not in out  # never left production


def test_the_soak_says_each_familys_recovery_and_every_prediction_input(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The summary tables the recovery by fault family (measured) and, with a prediction,
    every input it was fed with its basis: measured here, from the schedule, or assumed."""
    from rackscale.soak.predict import predict
    from rackscale.soak.schedule import from_dict

    # Whole cells, no wrapping. The console reads COLUMNS on each print; setting its width
    # instead would pin it for every later test when monkeypatch restores it.
    monkeypatch.setenv("COLUMNS", "240")
    r = json.loads(SOAK.read_text())
    r["event_seq"] = 7
    sched = from_dict(json.loads((SOAK.parent / "schedule.json").read_text()))
    r["predicted"] = predict(r, sched, ckpt_every=10, trials=200)
    r["predicted"]["inputs"]["detect_min"] = {"value": 3.0, "basis": "assumed (test)",
                                              "from": "a made-up source"}
    _say_soak(r)
    out = " ".join(capsys.readouterr().out.split())
    assert "recovery by fault family" in out
    assert "fail-stop GPU" in out and "fail-slow GPU" in out
    assert "prediction inputs" in out and "restart_min" in out
    assert "assumed (test)" in out and "a made-up source" in out
    assert "measured" in out and "schedule" in out
