"""User errors of the real backend and the runners: exit 2, a message that says what to do."""

from __future__ import annotations

import json

import pytest
from lab_rig import FLEET, cli

from rackscale.certify import LadderConfig, LadderConfigError
from rackscale.certify.runners import RunnerError, loopback_placement
from rackscale.certify.runners.local import CollectivePlanner
from rackscale.certify.verdict import SHARED_CPU_THRESHOLDS, THRESHOLDS


def test_faults_file_with_real_backend_points_at_lab_inject(tmp_path) -> None:
    f = tmp_path / "f.yaml"
    f.write_text("faults: []\n")
    p = cli("certify", "run", "--fleet", FLEET, "--backend", "real", "--faults", str(f),
            "--db", f"sqlite:///{tmp_path}/d.db")
    assert p.returncode == 2 and "lab inject" in p.stderr and "Traceback" not in p.stderr


def test_unknown_runner_lists_the_valid_ones(tmp_path) -> None:
    p = cli("certify", "run", "--fleet", FLEET, "--backend", "real", "--runner", "mpi",
            "--lab", str(tmp_path / "none"), "--db", f"sqlite:///{tmp_path}/d.db")
    assert p.returncode == 2 and "valid runners: local, slurm" in p.stderr


def test_ladder_config_needs_a_threshold_per_probe() -> None:
    with pytest.raises(LadderConfigError, match="thresholds lack probes gemm"):
        LadderConfig(thresholds={k: v for k, v in THRESHOLDS.items() if k != "gemm"})
    assert LadderConfig(thresholds=dict(SHARED_CPU_THRESHOLDS)).thresholds["gemm"].hard_rel \
        == 0.5


def test_collective_plan_binds_nvlink_inside_a_domain_and_scaleout_across() -> None:
    gpus = ["a/r1/c1/gpu0", "a/r1/c1/gpu1", "a/r2/c1/gpu0", "a/r2/c1/gpu1", "a/r2/c2/gpu0"]
    place = loopback_placement(gpus)
    dom = {g: g.split("/")[1] for g in gpus}
    planner = CollectivePlanner(place, dom, iters=1, warmup=0, timeout_s=1)
    inside = planner.commands(gpus[:2], 1 << 20, nvlink=True)
    assert all("hier" not in c for c in inside.values())
    across = planner.commands(gpus, 1 << 20, nvlink=True)
    h = {g: c["hier"] for g, c in across.items()}
    # smallest domain has 2 ranks: 2 chunks; r2's third rank gets the result by broadcast
    assert {x["chunks"] for x in h.values()} == {2}
    assert [h[g]["local"] for g in gpus] == [0, 1, 0, 1, 2]
    assert [c["rank"] for c in across.values()] == [0, 1, 2, 3, 4]
    off = planner.commands(gpus, 1 << 20, nvlink=False)
    assert all("hier" not in c for c in off.values())
    with pytest.raises(RunnerError, match="no place"):
        planner.commands(["x/r9/c1/gpu0", gpus[0]], 1 << 20, nvlink=False)


def test_ranks_sharing_this_host_are_capped_by_its_cores_for_both_runners() -> None:
    """Slurm nodes emulated on one machine share its cores whatever slurm.conf says: the
    Slurm runner caps ranks in flight as the local runner does (rings that queue for a core
    measured the host, not the links: the spine rings ran 8 ranks at once on 2 cores)."""
    from rackscale.certify.runners import placement_from_places
    from rackscale.certify.runners.base import host_rank_cap
    from rackscale.certify.runners.slurm import on_this_host

    places = {f"lab/r01/c01/gpu{i}": {"nominal_cpu": 0.5} for i in range(8)}
    assert host_rank_cap(placement_from_places(places, "lab"), cores=2) == 4
    assert host_rank_cap(placement_from_places(places, "lab"), cores=16) == 32
    assert host_rank_cap(loopback_placement(["a/r1/c1/gpu0"])) is None
    assert on_this_host({"NodeAddr": "127.0.0.1", "NodeHostName": "x"})
    assert not on_this_host({"NodeAddr": "10.1.2.3", "NodeHostName": "node17"})


def test_a_lab_dir_that_is_not_an_up_lab_is_refused_not_certified_on_the_loopback(
        tmp_path) -> None:
    """A typo in --lab used to run the ladder on the loopback and exit 0: a faulted lab
    certified clean. A --lab given must name an up lab (its recorded lab-state.json)."""
    db = f"sqlite:///{tmp_path}/d.db"
    missing = tmp_path / "typo"
    p = cli("certify", "run", "--fleet", FLEET, "--backend", "real", "--runner", "local",
            "--lab", str(missing), "--stages", "1", "--db", db, "--out", str(tmp_path / "o"))
    assert p.returncode == 2, p.stdout + p.stderr
    assert str(missing) in p.stderr and f"rackscale lab up --lab {missing}" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "o" / "findings.jsonl").exists()
    empty = tmp_path / "empty"  # a directory, but no lab recorded in it
    empty.mkdir()
    p = cli("certify", "run", "--fleet", FLEET, "--backend", "real", "--lab", str(empty),
            "--stages", "1", "--db", db, "--out", str(tmp_path / "o"))
    assert p.returncode == 2 and str(empty) in p.stderr and "lab up" in p.stderr


def test_lab_commands_on_a_missing_lab_dir_say_which_dir(tmp_path) -> None:
    missing = tmp_path / "typo"
    f = tmp_path / "f.yaml"
    f.write_text("faults: []\n")
    p = cli("lab", "inject", str(f), "--lab", str(missing))
    assert p.returncode == 2 and str(missing) in p.stderr
    assert f"rackscale lab up --lab {missing}" in p.stderr
    d = cli("lab", "down", "--lab", str(missing), "--json")  # harmless: nothing to remove
    assert d.returncode == 0 and json.loads(d.stdout) == {"removed": []}
    assert not missing.exists()


def test_job_run_refuses_a_lab_dir_its_runner_does_not_use(tmp_path) -> None:
    """--lab with --runner local would be ignored: the job would run off the lab, unsaid."""
    p = cli("job", "run", "--runner", "local", "--lab", str(tmp_path / "typo"), "--gpus", "1",
            "--job-dir", str(tmp_path / "job"), "--", "true")
    assert p.returncode == 2 and "--runner lab" in p.stderr and "Traceback" not in p.stderr
