"""Two supervised jobs that share one tiers config (as many nodes do): the second job, in a
fresh job directory, starts from its own first step, not from the first job's checkpoint,
and ends with the parameters it has when it runs alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackscale.checkpoint import Restorer, Tiers, load_config
from tests.recovery import rig

pytestmark = pytest.mark.slow
STEPS = 16  # checkpoints at 5, 10 and 15


def test_a_new_job_on_a_shared_config_never_resumes_another_jobs_checkpoint(
        tmp_path: Path) -> None:
    shared = tmp_path / "tiers.json"
    shared.write_text(json.dumps({
        "local_dir": str(tmp_path / "nodes"),
        "region": {"name": "region", "kind": "dir", "path": str(tmp_path / "region")},
        "chunk_size": 1 << 20, "part_size": 4 << 20, "fsync": False}))
    jobs = {}
    for name, seed in (("a", 0), ("b", 1)):
        job = tmp_path / name / "job"  # the same directory name: ids still differ
        job.parent.mkdir()
        cmd = rig.trainer_cmd(job, "--seed", str(seed), steps=STEPS)
        rc, out = rig.finish(rig.start(job, cmd, "--config", str(shared), spares=0), job)
        assert rc == 0 and out["attempts"] == 1, out
        jobs[name] = (job, out)
    (a, out_a), (b, out_b) = jobs["a"], jobs["b"]
    assert rig.result(b)["resumed_from"] is None
    assert rig.result(b)["params_sha256"] == rig.reference_digest(STEPS, seed=1)
    assert rig.result(a)["params_sha256"] == rig.reference_digest(STEPS, seed=0)
    assert out_a["job_id"] != out_b["job_id"] and out_b["job_id"].startswith("job-")
    for job, out in jobs.values():  # each job's own checkpoints, named by it
        tiers = Tiers(load_config(job / "tiers.json"))
        assert tiers.cfg.job == out["job_id"]
        assert Restorer(tiers).list_ids() == [f"step-{s:08d}" for s in (5, 10, 15)]
        assert tiers.read_manifest(tiers.region, "step-00000015").job == out["job_id"]
