"""`report diff`: what changed between two reports and why."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import Topology, seed_fleet
from rackscale.report import build_document, build_ledger
from rackscale.report.diff import diff_documents, with_history

from .scale import memory_view

runner = CliRunner()
TOPO = Topology.build(seed_fleet("seed-504"))
RACKS = [r.id for r in TOPO.racks]
# candidate faults over the seed fleet: one of each ledger rule, on several racks
CANDIDATES = [(f"{r}/c{t:02d}/gpu{g}", "slow_gpu") for r in RACKS for t, g in ((3, 1), (11, 2))]
CANDIDATES += [(f"{r}/c07/nic0", "bad_cable") for r in RACKS[::2]]
CANDIDATES += [(f"{r}/s02", "nvlink_switch_down") for r in RACKS[1::3]]
CANDIDATES += [(f"{r}/cdu", "coolant_flow_low") for r in RACKS[2::4]]

faults_st = st.lists(st.sampled_from(CANDIDATES), unique=True, max_size=8)
maint_st = st.sets(st.sampled_from(RACKS), max_size=2)


def _doc(faults: list[tuple[str, str]], maintenance: set[str]) -> dict:
    view = memory_view(TOPO, faults, maintenance)
    return build_document(view, build_ledger(view))


SLOW = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(faults_st, maint_st)
def test_diff_of_a_report_with_itself_is_empty(faults: list, maintenance: set) -> None:
    doc = _doc(faults, maintenance)
    diff = diff_documents(doc, copy.deepcopy(doc))
    assert diff["empty"], diff
    assert not (diff["ledger"] or diff["findings_new"] or diff["findings_cleared"]
                or diff["racks"] or diff["job_shapes"])


@SLOW
@given(faults_st, maint_st, faults_st, maint_st)
def test_diff_names_every_change(f1: list, m1: set, f2: list, m2: set) -> None:
    old, new = _doc(f1, m1), _doc(f2, m2)
    diff = diff_documents(old, new)
    key = lambda f: (f["component"], f["kind"])  # noqa: E731
    assert {key(f) for f in diff["findings_new"]} == set(f2) - set(f1)
    assert {key(f) for f in diff["findings_cleared"]} == set(f1) - set(f2)
    changed = {s["key"]: s for s in diff["ledger"]}
    for a, b in zip(old["ledger"], new["ledger"], strict=True):
        if a["count"] != b["count"] or a["lost"] != b["lost"]:
            d = changed[a["key"]]
            assert d["delta"] == pytest.approx(b["count"] - a["count"], abs=0.05)
            for code in set(a["lost"]) | set(b["lost"]):
                moved = b["lost"].get(code, 0) - a["lost"].get(code, 0)
                assert d["lost_delta"].get(code, 0) == pytest.approx(moved, abs=0.05)
                if abs(moved) > 0.05:
                    assert d["why"][code]  # every moved reason is explained
        else:
            assert a["key"] not in changed
    moved_racks = {r["id"] for r in diff["racks"]}
    for a, b in zip(old["racks"], new["racks"], strict=True):
        assert (a["id"] in moved_racks) == (a["state"] != b["state"]
                                            or a["usable_gpus"] != b["usable_gpus"])
    assert diff["empty"] == (set(f1) == set(f2) and m1 == m2)


def test_returned_racks_and_history() -> None:
    old = _doc([("us-east/r03/cdu", "coolant_flow_low")], {"us-west/r02"})
    new = _doc([], set())
    diff = diff_documents(old, new)
    by_id = {r["id"]: r for r in diff["racks"]}
    assert by_id["us-west/r02"]["change"] == "returned to production"
    assert by_id["us-east/r03"]["change"] == "usable GPUs changed"
    assert by_id["us-east/r03"]["new_usable"] - by_id["us-east/r03"]["old_usable"] == 72
    powered = next(s for s in diff["ledger"] if s["key"] == "powered")
    assert powered["lost_delta"] == {"rack_state:maintenance": -72}
    # history: each build carries the last reports' ledger counts, oldest first
    with_history(old, None)
    with_history(new, old)
    assert [h["ledger"]["powered"] for h in new["history"]] == [432, 504]
    assert new["changes"]["ledger"] == diff["ledger"]


def test_cli_diff_table_and_json(tmp_path: Path) -> None:
    old = _doc([("us-east/r03/cdu", "coolant_flow_low"), ("us-east/r01/c03/gpu1", "slow_gpu")],
               set())
    new = _doc([("us-east/r01/c03/gpu1", "slow_gpu"), ("us-west/r01/s02", "nvlink_switch_down")],
               set())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(old))
    b.write_text(json.dumps(new))
    r = runner.invoke(app, ["report", "diff", str(a), str(b), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert [f["component"] for f in out["findings_new"]] == ["us-west/r01/s02"]
    assert [f["component"] for f in out["findings_cleared"]] == ["us-east/r03/cdu"]
    r = runner.invoke(app, ["report", "diff", str(a), str(b)], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "new finding: us-west/r01/s02 nvlink_switch_down" in r.output
    assert "cleared finding: us-east/r03/cdu coolant_flow_low" in r.output
    assert "domain_degraded:nvlink_switch_down" in r.output
    r = runner.invoke(app, ["report", "diff", str(a), str(a)])
    assert r.exit_code == 0 and "no changes" in r.output
    (tmp_path / "x.json").write_text("[1, 2]")
    r = runner.invoke(app, ["report", "diff", str(a), str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "x.json" in r.output and "Traceback" not in r.output
    (tmp_path / "y.json").write_text('{"schema_version": "other/1"}')
    r = runner.invoke(app, ["report", "diff", str(tmp_path / "y.json"), str(a)])
    assert r.exit_code == 2 and "not a rackscale report" in r.output
