"""A straggler in a rack with a cooling condition: the rack's slots in the job leave as one
(one restart, spares from another rack, one incident on the rack), not one GPU per restart.
The supervisor runs in this process on fake ranks (no torch), through `build_setup` with a
site whose cooling source names the hot rack; the lab's own source reads its state file.
Fast: a few seconds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from rackscale.certify import loopback_placement
from rackscale.cli.job import lab_cooling
from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.recovery import Site, SparesExhausted, Supervisor, build_setup, make_job_config
from tests.recovery import rig

# Two racks of four GPUs (lab-mini: two trays of two), as the lab's own fleet.
TOPO = Topology.build(FleetSpec(name="two-racks", regions=[
    RegionSpec(name="east", racks=[RackGroup(template="lab-mini", count=2)])]))
R1 = [g for g in TOPO.gpu_ids if TOPO.gpu_place(g).rack == "east/r01"]
R2 = [g for g in TOPO.gpu_ids if TOPO.gpu_place(g).rack == "east/r02"]
HOT = {"east/r01": {"cdu": "east/r01/cdu", "flow": 0.5, "basis": "simulated"}}

# A rank of 40 steps, a step every 40 ms, writing its beats as it goes; a rank whose slot is
# named in argv computes 3x the others' time from step 8 (its rack's cooling).
RANK = r"""
import json, os, sys, time
job, rank = os.environ["RACKSCALE_JOB_DIR"], int(os.environ["RANK"])
attempt, slot = int(os.environ["RACKSCALE_ATTEMPT"]), os.environ["RACKSCALE_SLOT"]
path = os.path.join(job, "beats", f"a{attempt:03d}-r{rank:04d}.jsonl")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "a") as f:
    def beat(phase, step, **kw):
        f.write(json.dumps({"phase": phase, "step": step, "t": time.time(), **kw}) + "\n")
        f.flush()
    beat("start", 0, slot=slot, pid=os.getpid())
    beat("restored", 0, restore_s=0.0, ckpt=None)
    for step in range(1, 41):
        beat("sync", step, compute_s=0.03 if slot in sys.argv[1:] and step >= 8 else 0.01)
        time.sleep(0.04)
        beat("step", step, step_s=0.04)
    beat("done", 40)
"""


def _supervisor(job: Path, slots: list[str], gpus: int, *, slow: list[str]) -> Supervisor:
    """A 4-rank job on `slots` (its GPUs first, then spares) with r01 hot; `slow` throttled."""
    site = Site(topo=TOPO, placement=loopback_placement(slots), cooling=lambda: HOT)
    setup = build_setup(runner="lab", job_dir=job, slots=len(slots), config=None, db=None,
                        site=site)
    cfg = make_job_config(command=[sys.executable, "-c", RANK, *slow], gpus=gpus,
                          spares=len(slots) - gpus, ckpt_every=5, stop_timeout_s=5.0)
    return Supervisor(cfg, setup)


def test_two_stragglers_of_a_hot_rack_leave_together_in_one_restart(tmp_path: Path) -> None:
    job = tmp_path / "job"
    # ranks 0, 1 on the hot rack, 2, 3 on the other; one spare on the hot rack (not taken)
    slots = [R1[0], R1[1], R2[0], R2[1], R1[2], R2[2], R2[3]]
    st = _supervisor(job, slots, 4, slow=[R1[0], R1[1]]).run()
    assert st.finished and st.attempt == 2  # one restart for the two slow ranks
    assert sorted(st.excluded) == [R1[0], R1[1]]
    assert st.assignment == [R2[2], R2[3], R2[0], R2[1]]  # spares from the other rack
    assert st.spares == [R1[2]]  # the hot rack's spare stays, for after its repair
    (inc,) = rig.incidents(job)
    assert inc["component"] == "east/r01" and inc["fault_kind"] == "coolant_flow_low"
    assert inc["symptom"] == "straggler" and inc["rank"] in (0, 1)
    assert inc["outcome"] == "resumed" and inc["localize_s"] == 0.0  # no probe ran
    assert inc["slot"] == slots[inc["rank"]] and inc["spare"] == st.assignment[inc["rank"]]
    ev = inc["evidence"]
    assert ev["excluded"] == [R1[0], R1[1]] and ev["racks"] == ["east/r01"]
    assert ev["moves"] == {R1[0]: R2[2], R1[1]: R2[3]}
    assert ev["cooling"] == HOT
    findings = [json.loads(x) for x in (job / "incidents.jsonl").read_text().splitlines()]
    (fin,) = [f for f in findings if f["kind"] == "certify.finding"]
    assert fin["component"] == "east/r01" and fin["payload"]["kind"] == "coolant_flow_low"


def test_too_few_spares_outside_the_hot_rack_stops_the_job_as_no_spare(tmp_path: Path) -> None:
    job = tmp_path / "job"
    slots = [R1[0], R1[1], R2[0], R2[1], R1[2], R2[2]]  # one cool spare for two hot slots
    with pytest.raises(SparesExhausted, match="only 1 spares lie in other racks"):
        _supervisor(job, slots, 4, slow=[R1[0], R1[1]]).run()
    state = json.loads((job / "state.json").read_text())
    assert sorted(state["excluded"]) == [R1[0], R1[1]] and state["rank_pids"] == []
    (inc,) = rig.incidents(job)
    assert inc["component"] == "east/r01" and inc["outcome"] == "no_spare"
    assert inc["spare"] is None


def _lab_state(d: Path, faults: list[dict[str, Any]]) -> Path:
    d.mkdir()
    (d / "lab-state.json").write_text(json.dumps({"version": 1, "faults": faults}))
    return d


def test_the_lab_source_names_racks_whose_cdu_has_coolant_flow_low(tmp_path: Path) -> None:
    lab_dir = _lab_state(tmp_path / "lab", [
        {"kind": "coolant_flow_low", "target": "east/r02/cdu", "severity": 0.6,
         "simulated": "simulated: no loop"},
        {"kind": "coolant_flow_low", "target": "east/r02/cdu", "severity": 0.4},
        {"kind": "slow_gpu", "target": R1[0], "severity": 0.5},
        {"kind": "flapping", "of": "coolant_flow_low", "target": "east/r01/cdu"}])
    hot = lab_cooling(lab_dir, TOPO)()
    assert hot == {"east/r02": {"cdu": "east/r02/cdu", "flow": 0.4, "basis": "simulated",
                                "why": "simulated: no loop"}}
    assert lab_cooling(tmp_path / "no-lab", TOPO)() == {}  # no lab state: no fault present


def test_a_store_with_the_fleet_loaded_takes_the_rack_as_the_incidents_part(
        tmp_path: Path) -> None:
    """The recorder refuses parts outside the store's fleet; a rack id is one of its parts."""
    from rackscale.recovery import IncidentPayload, Recorder
    from rackscale.store import Store, load_topology

    store = Store(f"sqlite:///{tmp_path / 'rs.db'}")
    load_topology(store, TOPO, actor="test", reason="test")
    rec = Recorder(tmp_path, store, fleet=TOPO)
    inc = IncidentPayload(job="job", attempt=1, symptom="straggler", rank=0,
                          component="east/r01", fault_kind="coolant_flow_low", slot=R1[0])
    assert rec.exclude(inc) == "coolant_flow_low"
    rec.incident(inc)
    kinds = {e.kind for e in store.events(component_id="east/r01")}
    assert {"certify.finding", "recovery.incident"} <= kinds
    store.close()
