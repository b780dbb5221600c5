"""Checkpoints belong to a job: two jobs that share one tiers config never see, resume or
refuse each other's checkpoints, and a restore through a job's tiers refuses another job's
manifest; checkpoints saved without a job stay readable by the tools but no job resumes one.
Also which checkpoint a job resumes when its newest one is damaged (`resume_point`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rackscale.checkpoint import (
    CheckpointManager,
    ConfigError,
    Restorer,
    Tiers,
    for_job,
    resume_point,
)
from rackscale.checkpoint.errors import ManifestInvalid
from tests.checkpoint.test_restore_rules import BLOB, ck, dir_cfg, save


def test_two_jobs_on_one_config_have_their_own_checkpoints(tmp_path: Path) -> None:
    shared = dir_cfg(tmp_path)
    a, b = for_job(shared, "a-1"), for_job(shared, "b-2")
    ta = save(a, 5, 10, 15)
    tb = Tiers(b)
    assert resume_point(tb).id is None  # job B starts fresh, not from A's step 15
    assert Restorer(tb).list_ids() == []
    # B's own saves of the same steps are not refused as "already committed" by A's
    save(b, 5)
    assert resume_point(tb).id == ck(5) and resume_point(ta).id == ck(15)
    assert Restorer(tb).resolve_id("latest") == ck(5)
    assert Restorer(ta).resolve_id("latest") == ck(15)
    m = tb.read_manifest(tb.region, ck(5))
    assert m is not None and m.job == "b-2" and m.version == 3
    assert tb.layout.manifest(ck(5)) == f"ckpt/jobs/b-2/{ck(5)}/manifest.json"
    # the tools without a job list the unscoped key space only: no job's ids, no "jobs"
    assert Restorer(Tiers(shared)).list_ids() == []


def test_a_restore_for_one_job_refuses_another_jobs_manifest(tmp_path: Path) -> None:
    shared = dir_cfg(tmp_path)
    ta, tb = save(for_job(shared, "a-1"), 7), Tiers(for_job(shared, "b-2"))
    for store in tb.all:  # A's copy moved by hand into B's key space
        src = store.path(ta.layout.ckpt_prefix(ck(7)))
        if src.exists():
            shutil.copytree(src, store.path(tb.layout.ckpt_prefix(ck(7))))
    with pytest.raises(ManifestInvalid, match=r"belongs to job 'a-1', not to job 'b-2'; a "
                                              r"job resumes only its own checkpoints"):
        Restorer(tb).restore(ck(7))
    assert resume_point(tb).id is None
    assert "belongs to job 'a-1'" in resume_point(tb).skipped[ck(7)]


def test_old_checkpoints_without_a_job_stay_readable_but_no_job_resumes_one(
        tmp_path: Path) -> None:
    shared = dir_cfg(tmp_path)
    old = save(shared, 3)  # as saved before checkpoints named their job
    assert Restorer(old).list_ids() == [ck(3)]
    assert Restorer(old).restore("latest").id == ck(3)
    assert old.read_manifest(old.region, ck(3)).job == ""
    job = Tiers(for_job(shared, "a-1"))
    assert resume_point(job).id is None and Restorer(job).list_ids() == []
    for store in job.remote:  # even copied into the job's key space it is not the job's
        shutil.copytree(store.path(old.layout.ckpt_prefix(ck(3))),
                        store.path(job.layout.ckpt_prefix(ck(3))))
    with pytest.raises(ManifestInvalid, match="belongs to no job"):
        Restorer(job).restore(ck(3))


def test_a_job_scope_keeps_its_local_bookkeeping_apart(tmp_path: Path) -> None:
    shared = dir_cfg(tmp_path)
    ta = save(for_job(shared, "a-1"), 5)
    tb = Tiers(for_job(shared, "b-2"))
    assert ta.root != tb.root and _ids(ta) == [ck(5)] and _ids(tb) == []
    with CheckpointManager(tb) as mgr:  # B's resume leaves A's cache and catalog alone
        mgr.resume()
    assert _ids(ta) == [ck(5)] and ta.read_manifest(ta.local, ck(5)) is not None


def test_a_config_scoped_to_one_job_is_not_given_to_another(tmp_path: Path) -> None:
    a = for_job(dir_cfg(tmp_path), "a-1")
    assert for_job(a, "a-1") == a
    with pytest.raises(ConfigError, match="scoped to job 'a-1', not 'b-2'"):
        for_job(a, "b-2")
    with pytest.raises(ConfigError, match="job id"):
        for_job(dir_cfg(tmp_path), "../x")


# --- the checkpoint a job resumes when its newest is damaged -------------------------------
def test_resume_falls_back_past_a_damaged_newest_checkpoint_and_says_why(
        tmp_path: Path) -> None:
    cfg = for_job(dir_cfg(tmp_path, replicas=[]), "a-1")
    tiers = save(cfg, 5, 10)
    key = tiers.layout.data(ck(10), "blob")
    raw = bytearray(tiers.region.path(key).read_bytes())
    raw[5] ^= 1
    tiers.region.path(key).write_bytes(bytes(raw))
    point = resume_point(tiers)
    assert (point.id, point.step) == (ck(5), 5)
    assert point.skipped == {ck(10): "no tier holds an intact copy: us-east corrupt "
                                     "(damaged: blob chunk 0)"}
    tiers.region.path(tiers.layout.data(ck(5), "n")).unlink()
    point = resume_point(tiers)
    assert point.id is None and "us-east missing (objects gone: n)" in point.skipped[ck(5)]


def test_resume_takes_a_newest_checkpoint_that_another_tier_holds_intact(
        tmp_path: Path) -> None:
    tiers = save(for_job(dir_cfg(tmp_path), "a-1"), 5, 10)
    tiers.region.path(tiers.layout.data(ck(10), "blob")).unlink()
    assert resume_point(tiers).id == ck(10)  # the replica's copy serves a restore
    shutil.rmtree(tiers.local.root)  # a new node
    assert Restorer(tiers).restore(ck(10)).served_by["us-west"] == -(-len(BLOB) // 4096)


def test_a_checkpoint_verified_once_is_not_read_again(tmp_path: Path, monkeypatch) -> None:
    tiers = save(for_job(dir_cfg(tmp_path), "a-1"), 5)
    seen: set[tuple[str, str]] = set()
    assert resume_point(tiers, seen).id == ck(5) and len(seen) == 1
    monkeypatch.setattr(Restorer, "verify", lambda *a, **k: pytest.fail("read again"))
    assert resume_point(tiers, seen).id == ck(5)


def _ids(tiers: Any) -> list[str]:
    """The checkpoint ids of a node's catalog."""
    return sorted({k for k, _ in tiers.catalog_keys()})
