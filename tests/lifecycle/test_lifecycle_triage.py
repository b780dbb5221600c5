"""Certification findings -> triage, rack-level handling, escalation; passing -> production."""

from __future__ import annotations

from lc_rig import Rig

from rackscale.lifecycle import apply_findings, counts, promote_passing, set_goal, state_of


def _finding(rig: Rig, cid: str, kind: str, verdict: str = "fail") -> None:
    rig.store.append_event(cid, "certify.finding", {
        "component": cid, "kind": kind, "stage": "gpu", "evidence": {}, "confidence": 0.9,
        "run_id": "run-1", "backend": "twin", "verdict": verdict})


def test_findings_move_parts_and_passing_parts_go_to_production(rig: Rig) -> None:
    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    rig.ctl.run(until_idle=True, max_passes=200)
    ready = [r for r in rig.ctl.targets if state_of(rig.store, r).state == "burn_in"]
    assert len(ready) == 3
    r1, r2, r3 = ready
    _finding(rig, f"{r1}/c07/gpu3", "slow_gpu")
    _finding(rig, f"{r1}/c07/nic1", "bad_cable")  # same tray: one move
    for k in ("c01", "c02", "c03"):
        _finding(rig, f"{r2}/{k}/gpu0", "gpu_dead")
    _finding(rig, f"{r3}/s04", "nvlink_switch_down")
    _finding(rig, "a/leaf-rail2-0", "leaf_degraded")
    _finding(rig, f"{r1}/c09/gpu1", "slow_gpu", verdict="warn")
    _finding(rig, "nowhere/r9/c01/gpu0", "gpu_dead")
    for rid in ready:
        rig.store.append_event(rid, "certify.result", {"run_id": "run-1", "backend": "twin",
                                                       "verdict": "pass"})
    rep = apply_findings(rig.store, rig.topo)
    assert rep.findings == 9
    assert rep.trays_triaged == [f"{r1}/c07", f"{r2}/c01", f"{r2}/c02", f"{r2}/c03"]
    assert rep.racks_escalated == [r2] and rep.racks_rack_level == [r3]
    assert sorted(rep.noted) == sorted(["a/leaf-rail2-0", f"{r1}/c09/gpu1",
                                        "nowhere/r9/c01/gpu0"])
    promote_passing(rig.store, rig.topo, report=rep)
    assert state_of(rig.store, r1).state == "degraded"  # 1 tray out: tolerated
    assert state_of(rig.store, f"{r1}/c07").state == "triage"
    assert state_of(rig.store, f"{r1}/c08").state == "production"
    assert state_of(rig.store, r2).state == "maintenance"  # 3 bad trays: cordoned
    assert state_of(rig.store, r3).state == "maintenance"  # switch tray: rack-level
    snapshot = (counts(rig.store), rig.store.count_events())
    again = apply_findings(rig.store, rig.topo)
    promote_passing(rig.store, rig.topo, report=again)
    assert again.findings == 0 and not again.promoted
    assert (counts(rig.store), rig.store.count_events()) == snapshot


def test_pass_triage_runs_again_only_when_the_log_or_a_pass_moved(rig: Rig) -> None:
    """Between passes triage is skipped while nothing it reads changed; a new finding, or a
    pass that wrote (a fault field is written without an event), makes it run again."""
    from rackscale.lifecycle import PassTriage

    set_goal(rig.store, list(rig.ctl.targets), "burn_in")
    rig.ctl.run(until_idle=True, max_passes=200)
    rack = next(r for r in rig.ctl.targets if state_of(rig.store, r).state == "burn_in")
    tri = PassTriage(rig.store, rig.topo, rig.ctl.state)
    assert tri() is not None  # the first call always triages (here it moves nothing)
    assert tri(pass_wrote=False) is None  # settled: nothing new, nothing written
    assert tri(pass_wrote=True) is not None  # a pass that wrote: triage reads again
    assert tri(pass_wrote=False) is None

    _finding(rig, f"{rack}/c05/gpu1", "gpu_dead")  # another writer's finding lands
    rep = tri(pass_wrote=False)
    assert rep is not None and rep.trays_triaged == [f"{rack}/c05"]
    assert state_of(rig.store, f"{rack}/c05").state == "triage"
    assert tri(pass_wrote=False) is not None  # its own move moved the log: once more
    assert tri(pass_wrote=False) is None
