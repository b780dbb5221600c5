"""A short soak on the real lab (`rackscale job soak`, the CLI as its own process): a
supervised four-rank job beside the lifecycle, a dead GPU, a slow cable and a rack's low
coolant flow injected for real on a fixed schedule (`--schedule`, the format a drawn soak
writes), each lifted after its repair time. Asserts that each fault was detected, named and
recovered from; that the cooling fault drained its rack through the lifecycle's coolant tiers
and the job left that rack's slots as one; that repaired parts were certified again
(`certify run --scope`) before they rejoined; and that the measured ETTR, its interval, the
badput by cause and the simulator's prediction are in the store. Part of `make test` (about
4 minutes). Root, tc and torch are needed; without them the module fails with the reason."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rackscale import lab
from rackscale.fleet import Topology, load_fleet
from rackscale.simulate import failure_model
from rackscale.soak import BADPUT_CAUSES, LAB_ACTIONS, LabAction, draw
from rackscale.store import Store
from tests.needs import require

sys.path.insert(0, str(Path(__file__).parents[1] / "lab"))
from lab_rig import cli, torch_missing

require(lab.why_not_here() or torch_missing())
pytestmark = [pytest.mark.slow]

FLEET = lab.default_fleet_path()
DURATION_S = 190.0  # start-up (up to ~50 s on a loaded host), three faults, their recoveries


@pytest.fixture(scope="module")
def labdir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    sd = tmp_path_factory.mktemp("lab") / "state"
    lab.up(Topology.build(load_fleet(FLEET)), sd, fleet_file=FLEET)
    try:
        yield sd
    finally:
        lab.down(sd)


def _schedule(path: Path) -> None:
    """Three faults at fixed times after the job is ready: a dead GPU on rank 1, a slow
    cable (10% of its rate) on rank 2's NIC, then low coolant flow (30% of the rack's need)
    at rank 0's rack, held past the drain tier; the rest as a drawn schedule has it."""
    base = draw(failure_model("llama3"), count=3, gpus=4, duration_s=DURATION_S, seed=0,
                warmup_s=10, repair_s=20, settle_s=20)
    a, b, c = base.faults
    dead = replace(a, at_s=10.0, repair_s=20.0, rank=1, cause="faulty GPU",
                   model_kind="gpu_dead", lab=LAB_ACTIONS["gpu_dead"][0])
    cable = replace(b, at_s=45.0, repair_s=25.0, rank=2, cause="network switch/cable",
                    model_kind="bad_cable",
                    lab=LabAction(action="bad_cable", part="nic", severity=0.1))
    hot = replace(c, at_s=75.0, repair_s=35.0, rank=0, cause="coolant flow low (CDU)",
                  model_kind="coolant_flow_low",
                  lab=LabAction(action="coolant_flow_low", part="rack", severity=0.3))
    path.write_text(json.dumps(replace(base, faults=(dead, cable, hot)).to_dict()))


def test_a_short_soak_detects_names_and_recovers_each_fault_and_records_its_ettr(
        labdir: Path, tmp_path: Path) -> None:
    sched, out, db = tmp_path / "schedule.json", tmp_path / "soak", tmp_path / "soak.db"
    _schedule(sched)
    t0 = time.monotonic()
    done = cli("job", "soak", "--lab", str(labdir), "--schedule", str(sched), "--gpus", "4",
               "--spares", "4", "--ckpt-every", "5", "--out", str(out), "--db",
               f"sqlite:///{db}", "--json", timeout=DURATION_S + 240)
    wall = time.monotonic() - t0
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    r = json.loads(done.stdout)
    assert json.loads((out / "schedule.json").read_text())["faults"][1]["lab"]["action"] \
        == "bad_cable"  # written before the job ran (and kept)
    assert r["storage"]["config"] is None and r["storage"]["local_cache"] is True  # the default
    topo = Topology.build(load_fleet(FLEET))
    dead, cable, hot = r["faults"]
    store = Store(f"sqlite:///{db}", readonly=True)
    # the dead GPU: a crash of its rank, named as that GPU
    assert dead["detected"] and dead["recovered"], dead
    assert dead["named"]["component"] == dead["component"] and dead["named"]["kind"] == \
        "gpu_dead" and dead["named_vs_injected"] == "exact"
    # the slow cable: named as the NIC (not its GPU), localized by the probe
    nic = cable["component"]
    assert topo.ids[int(topo.gpu_nic[topo.gpu_ids.index(cable["slot"])])] == nic
    assert cable["detected"] and cable["recovered"], cable
    assert cable["named"]["component"] == nic and cable["named_vs_injected"] == "exact", cable
    assert cable["named"]["kind"] in ("bad_cable", "nic_dead")
    for f in (dead, cable):
        assert 0 <= f["time_to_detect_s"] < 60
    # the cooling fault: the lifecycle drained the rack, the job left its slots as one
    rack = hot["rack"]
    assert hot["detected"] and hot["recovered"] and hot["named_vs_injected"] == "its rack", hot
    assert hot["named"]["kind"] == "coolant_flow_low" and hot["time_to_detect_s"] < 40, hot
    went = [t["to"] for t in r["lifecycle"]["transitions"] if t["rack"] == rack]
    assert "draining" in went, r["lifecycle"]["transitions"]
    # ... and returned to production once the flow was restored and the rack certified again
    assert hot["recertified"]["scope"] == rack and hot["recertified"]["passed"], hot
    assert went[-1] == "production", went
    hot_incs = [e.payload for e in store.events(kind="recovery.incident")
                if e.payload["fault_kind"] == "coolant_flow_low"]
    assert len(hot_incs) == 1, hot_incs  # one restart for the rack, not one per GPU
    inc = hot_incs[0]
    assert inc["component"] == rack and len(inc["evidence"]["excluded"]) >= 1
    assert all(topo.holder(s).rack == rack for s in inc["evidence"]["excluded"])
    assert all(topo.holder(s).rack != rack for s in inc["evidence"]["moves"].values())
    # every repair was certified again before it rejoined: its tray once the job no longer
    # ran there, or with its rack (the cooling moved the job off it first)
    back = {s for e in store.events(kind="recovery.job") if e.payload["status"] == "rejoined"
            for s in e.payload["slots"]}
    for f in (dead, cable):
        rc = f["recertified"]
        assert rc["scope"] in (topo.holder(f["slot"]).tray, rack), f
        assert (f["slot"] in back) == rc["passed"], rc
    # the job took the rack's slots back only once the lifecycle served the rack again (its
    # return to production), never while the lifecycle still held it out
    served_at = max(t["t"] for t in r["lifecycle"]["transitions"]
                    if t["rack"] == rack and t["to"] == "production")
    for e in store.events(kind="recovery.job"):
        if e.payload["status"] == "rejoined" and any(
                topo.holder(s).rack == rack for s in e.payload["slots"]):
            assert e.time.timestamp() >= served_at, (e.payload, r["lifecycle"]["transitions"])
    assert r["lifecycle"]["states"][rack] == "production"
    # the measured figures, in the store
    (ev,) = store.events(kind="recovery.soak")
    p = ev.payload
    assert ev.component_id == f"job/{r['job']['id']}" and p["measured"] is True
    assert 0 < p["ettr"]["lo"] <= p["ettr"]["value"] <= p["ettr"]["hi"] <= 1.2
    assert set(p["badput_s"]) == set(BADPUT_CAUSES)
    assert [f["named_vs_injected"] for f in p["faults"]] == ["exact", "exact", "its rack"]
    assert p["host"] and p["load_avg"]["start"]
    assert p["predicted"]["simulated"] is True and 0 < p["predicted"]["ettr"] <= 1
    assert p["lifecycle"]["plant"].startswith("simulated")
    print(f"soak test: wall {wall:.0f} s, ETTR {p['ettr']}, predicted "
          f"{p['predicted']['ettr']}, badput {p['badput_s']}, load {p['load_avg']}, "
          f"rack {rack}: {went}, recertified {[f['recertified'] for f in r['faults']]}")
