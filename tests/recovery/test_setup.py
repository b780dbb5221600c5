"""A job's slots and recorder: with a fleet loaded in the store, slots are that fleet's GPUs
and every finding or incident names one of its parts; a part outside it is refused (exit 2),
never stored for lifecycle to merely note. Fast: no torch, no rank runs a training step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rackscale.certify import loopback_placement
from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.recovery import (
    IncidentPayload,
    NotInFleet,
    Recorder,
    Site,
    build_setup,
    job_slots,
)
from rackscale.store import Store, load_topology
from tests.recovery import rig

FLEET = Topology.build(FleetSpec(name="east-fleet", regions=[
    RegionSpec(name="east", racks=[RackGroup(template="gb200-nvl72", count=1)])]))


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'rs.db'}"
    store = Store(url)
    load_topology(store, FLEET, actor="test", reason="test")
    store.close()
    return url


def _incident(gpu: str, spare: str | None = None) -> IncidentPayload:
    return IncidentPayload(job="job", attempt=1, symptom="fail_stop", rank=1, component=gpu,
                           fault_kind="", spare=spare, detected_at=1.7e9, detect_s=0.2)


def test_a_job_on_this_host_gets_its_templates_tray_size() -> None:
    assert job_slots(5) == [*(f"local/r01/c01/gpu{k}" for k in range(4)), "local/r01/c02/gpu0"]
    hgx = job_slots(9, template="hgx-h100")
    assert hgx[7] == "local/r01/n01/gpu7" and hgx[8] == "local/r01/n02/gpu0"


def test_with_a_fleet_loaded_the_slots_and_findings_are_the_fleets(tmp_path: Path,
                                                                   db: str) -> None:
    setup = build_setup(runner="local", job_dir=tmp_path / "job", slots=3, config=None, db=db)
    assert list(setup.placement.ranks) == FLEET.gpu_ids[:3] == [
        "east/r01/c01/gpu0", "east/r01/c01/gpu1", "east/r01/c01/gpu2"]
    setup.recorder.exclude(_incident("east/r01/c01/gpu1", spare="east/r01/c01/gpu2"))
    store = Store(db, readonly=True)
    (finding,) = store.events(kind="certify.finding")
    assert finding.component_id == "east/r01/c01/gpu1"
    assert not store.events(prefix="local/")


def test_a_finding_or_incident_outside_the_fleet_is_refused_naming_it(tmp_path: Path,
                                                                      db: str) -> None:
    store = Store(db)
    rec = Recorder(tmp_path, store, fleet=FLEET)
    for write in (rec.exclude, rec.incident):
        with pytest.raises(NotInFleet, match=r"local/r01/c01/gpu0 is not a component of fleet "
                           r"east-fleet.*rackscale fleet load"):
            write(_incident("local/r01/c01/gpu0"))
    assert not (tmp_path / "incidents.jsonl").exists()  # refused before either copy
    assert not store.events(kind="certify.finding")
    rec.incident(_incident("job/job"))  # an incident on the job itself is no part's


def test_slots_of_another_fleet_are_refused_before_any_rank_starts(tmp_path: Path,
                                                                   db: str) -> None:
    lab = Topology.build(FleetSpec(name="lab-fleet", regions=[
        RegionSpec(name="lab", racks=[RackGroup(template="lab-mini", count=1)])]))
    site = Site(topo=lab, placement=loopback_placement(lab.gpu_ids))
    with pytest.raises(NotInFleet, match="lab/r01/c01/gpu0 is not a component of fleet "
                       "east-fleet"):
        build_setup(runner="lab", job_dir=tmp_path / "job", slots=2, config=None, db=db,
                    site=site)
    assert not (tmp_path / "job").exists()


def test_job_run_with_db_places_its_slots_on_the_loaded_fleet(tmp_path: Path, db: str) -> None:
    """The CLI end to end: the failing command needs no torch; state.json shows the slots."""
    job = tmp_path / "job"
    p = subprocess.run([sys.executable, "-m", "rackscale", "job", "run", "--job-dir", str(job),
                        "--gpus", "2", "--spares", "1", "--db", db, "--json", "--",
                        sys.executable, "-c", "import sys; sys.exit(3)"],
                       env=rig.env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    state = json.loads((job / "state.json").read_text())
    assert state["assignment"] == ["east/r01/c01/gpu0", "east/r01/c01/gpu1"]
    assert state["spares"] == ["east/r01/c01/gpu2"]


def test_a_job_started_on_this_hosts_ids_is_not_resumed_on_the_fleets(tmp_path: Path,
                                                                      db: str) -> None:
    """Its state names local/... slots; with the fleet in --db they are not in the
    placement, and resuming says so instead of failing on a missing slot mid-launch."""
    from rackscale.errors import UserError
    from rackscale.recovery import Supervisor, make_job_config

    job = tmp_path / "job"
    cfg = make_job_config(command=["true"], gpus=2, spares=1, ckpt_every=5, max_restarts=1,
                          warm=False, detect={})
    Supervisor(cfg, build_setup(runner="local", job_dir=job, slots=3, config=None,
                                db=None)).state.save(job)
    with pytest.raises(UserError, match="runs on GPU slot local/r01/c01/gpu0, which processes "
                       "on this host"):
        Supervisor(cfg, build_setup(runner="local", job_dir=job, slots=3, config=None, db=db))
