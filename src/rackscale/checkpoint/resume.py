"""Restart: finish what killed savers left on this node, and remove what never existed.

Driven by the catalog (one entry per save, per rank of a multi-rank save): a save with a
local commit (its manifest, or its rank's part record) is pushed on from its journal; one
without is discarded, and only its own files go (ranks of one save may share a directory;
files a committed manifest names are never touched). Data directories that no record
mentions at all (a DCP save killed before its first commit) are removed when no process
holds their lease; so are journals that no catalog entry owns.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from typing import TYPE_CHECKING, Any

from rackscale.checkpoint.errors import ManifestInvalid
from rackscale.checkpoint.multinode import PartCommit, SavePart, local_part, parts_prefix
from rackscale.checkpoint.upload import Committer, WholeCommit, set_latest

if TYPE_CHECKING:
    from rackscale.checkpoint.manifest import Manifest
    from rackscale.checkpoint.saver import CheckpointManager, SaveReport


def _local_commit(mgr: CheckpointManager, ckpt_id: str, part: SavePart | None) -> Manifest | None:
    if part is None:
        return mgr.tiers.read_manifest(mgr.tiers.local, ckpt_id)
    return local_part(mgr.tiers, ckpt_id, part)


def _discard(mgr: CheckpointManager, ckpt_id: str, tag: str, entry: dict[str, Any],
             part: SavePart | None) -> None:
    tiers = mgr.tiers
    data_dir = mgr.local_data_dir(ckpt_id)
    if tiers.read_manifest(tiers.local, ckpt_id) is None:  # never a committed one's files
        if part is None:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(data_dir)
        else:
            for name in entry.get("files", []):
                with contextlib.suppress(FileNotFoundError):
                    (data_dir / name).unlink()
    tiers.catalog_path(ckpt_id, tag).unlink()
    tiers.drop_journal(ckpt_id, tag)
    mgr.events("resume.discard", {"id": ckpt_id})


def resume_all(mgr: CheckpointManager) -> list[SaveReport]:
    from rackscale.checkpoint.saver import CommitJob, SaveReport

    tiers = mgr.tiers
    out = []
    for ckpt_id, tag in tiers.catalog_keys():
        entry = tiers.read_catalog(ckpt_id, tag) or {}
        part = SavePart.from_dict(entry["part"]) if entry.get("part") else None
        states = entry.get("states", {})
        try:
            local = _local_commit(mgr, ckpt_id, part)
        except ManifestInvalid as err:  # a damaged local copy is set aside, never pushed
            mgr.events("resume.quarantine", {"id": ckpt_id, "error": str(err),
                                             "to": str(tiers.quarantine(ckpt_id))})
            local = None
        with tiers.lease(ckpt_id):
            if local is None or local.save_uuid != entry.get("save_uuid"):
                if "local" not in states:
                    _discard(mgr, ckpt_id, tag, entry, part)
                continue
            if "local" not in states:  # killed between the local commit and the catalog
                states["local"] = local.states.get("local", time.time())
                if part is None:
                    set_latest(tiers.local, tiers, local)
            want_done = "replicated" if tiers.replicas else "region"
            due = mgr._archive_due(entry.get("seq", 0))
            if want_done in states and (not due or "archived" in states):
                continue
            report = SaveReport(id=ckpt_id, step=entry["step"], action="resumed",
                                states=dict(states), hash=entry.get("hash") or local.hash,
                                total_bytes=entry.get("bytes") or local.total_bytes)
            committer: Committer = PartCommit(tiers, part) if part else WholeCommit(tiers)
            job = CommitJob(manifest=local, seq=entry.get("seq", 0), committer=committer,
                          tag=tag, part=part)
            mgr.events("resume.start", {"id": ckpt_id})
            mgr._push_remote(report, job)
            out.append(report)
    sweep_orphans(mgr)
    return out


def sweep_orphans(mgr: CheckpointManager) -> list[str]:
    """Remove local data no record owns (the lease keeps a save in progress safe)."""
    tiers = mgr.tiers
    keys = set(tiers.catalog_keys())
    known = {cid for cid, _ in keys}
    removed = []
    base = tiers.local.path(tiers.layout.prefix)
    for d in sorted(base.iterdir()) if base.is_dir() else []:
        cid = d.name
        if not d.is_dir() or cid.startswith(".") or cid in known:
            continue
        try:
            if tiers.read_manifest(tiers.local, cid) is not None or \
                    tiers.local.list(parts_prefix(tiers, cid)):
                continue
        except ManifestInvalid:
            continue  # a damaged commit is for `verify` and the operator, not for the sweep
        with tiers.try_exclusive(cid) as free:
            if free:
                shutil.rmtree(d, ignore_errors=True)
                removed.append(cid)
                mgr.events("resume.orphan", {"id": cid})
    for p in sorted((tiers.root / "journal").glob("*.jsonl")):
        cid, at, rank = p.stem.partition("@")
        if (cid, at + rank) in keys:
            continue
        with tiers.try_exclusive(cid) as free:
            if free:
                p.unlink(missing_ok=True)
    return removed
