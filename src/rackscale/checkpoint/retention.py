"""Retention across tiers: last k local, last n in the region and each replica, the last
`keep_archived` of the archived ones. Never the `latest`, never one under a lease.

A checkpoint being saved or restored holds a shared flock on its lease file; gc takes it
exclusively without blocking and skips the checkpoint if it cannot. Deletion removes the
manifest first, so a reader never sees a manifest whose data is half gone.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from rackscale.checkpoint.errors import (
    ManifestInvalid,
    ObjectMissing,
    StoreAuthError,
    StoreUnreachable,
)
from rackscale.checkpoint.manifest import parse_latest
from rackscale.checkpoint.multinode import local_part_steps, parts_prefix
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.tiers import Tiers


@dataclass(slots=True)
class GcReport:
    deleted: dict[str, list[str]] = field(default_factory=dict)  # tier -> ids
    kept: dict[str, list[str]] = field(default_factory=dict)
    skipped_leased: list[str] = field(default_factory=list)
    aborted_uploads: list[str] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # "tier:id" whose manifest is bad: kept
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _step_of(tiers: Tiers, store: ObjectStore, ckpt_id: str, bad: set[str]) -> int:
    try:
        m = tiers.read_manifest(store, ckpt_id)
    except ManifestInvalid:
        bad.add(ckpt_id)  # kept and reported: `verify` says what is wrong, an operator decides
        return -1
    return m.step if m else -1


def _has_local(tiers: Tiers, ckpt_id: str) -> bool:
    """A good local manifest: only then can `resume()` finish an upload of this checkpoint."""
    try:
        return tiers.read_manifest(tiers.local, ckpt_id) is not None
    except ManifestInvalid:
        return False


def _delete(tiers: Tiers, store: ObjectStore, ckpt_id: str) -> None:
    store.delete(tiers.layout.manifest(ckpt_id))  # first: from now on it does not exist
    if store is tiers.local:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(store.path(tiers.layout.ckpt_prefix(ckpt_id)))
        return
    for key in store.list(tiers.layout.ckpt_prefix(ckpt_id)):
        store.delete(key)


def gc(tiers: Tiers, *, dry_run: bool = False) -> GcReport:
    pol = tiers.cfg.retention
    report = GcReport(dry_run=dry_run)
    keep_n = {tiers.local.name: pol.keep_local}
    for s in [tiers.region, *tiers.replicas]:
        keep_n[s.name] = pol.keep_region
    if tiers.archive is not None:
        keep_n[tiers.archive.name] = pol.keep_archived or 10**9
    latest_ids: set[str] = set()
    for s in tiers.all:
        with contextlib.suppress(ObjectMissing, StoreUnreachable, StoreAuthError,
                                 ManifestInvalid):
            latest_ids.add(parse_latest(s.get(tiers.layout.latest)).id)
    for s in tiers.all:
        try:
            ids = tiers.committed_ids(s)
            bad: set[str] = set()
            # A node of a multi-node save holds only its ranks' parts (no whole manifest):
            # they count among the local copies, by the step their part records name.
            parts = local_part_steps(tiers) if s is tiers.local else {}
            ids = sorted(set(ids) | set(parts))
            ids.sort(key=lambda i: (max(_step_of(tiers, s, i, bad), parts.get(i, -1)), i))
            keep = set(ids[-keep_n[s.name]:]) | latest_ids | bad
            report.damaged.extend(f"{s.name}:{i}" for i in sorted(bad))
            report.kept[s.name] = [i for i in ids if i in keep]
            for ckpt_id in ids:
                if ckpt_id in keep:
                    continue
                with tiers.try_exclusive(ckpt_id) as got:
                    if not got:
                        report.skipped_leased.append(f"{s.name}:{ckpt_id}")
                        report.kept[s.name].append(ckpt_id)
                        continue
                    if not dry_run:
                        _delete(tiers, s, ckpt_id)
                    report.deleted.setdefault(s.name, []).append(ckpt_id)
            # Uploads left by a dead saver that no journal will resume (killed before the
            # upload id was recorded, or the checkpoint never reached its local manifest).
            for key, upload_id in s.list_uploads(tiers.layout.prefix + "/"):
                ckpt_id = key.split("/")[1]
                journal = tiers.read_journal(ckpt_id)
                committed_here = (_has_local(tiers, ckpt_id)
                                  or tiers.local.list(parts_prefix(tiers, ckpt_id)))
                if committed_here and any(e.get("upload_id") == upload_id
                                          for e in journal.values()):
                    continue  # resumable: `resume()` will finish it
                with tiers.try_exclusive(ckpt_id) as got:
                    if got and not dry_run:
                        s.abort_upload(key, upload_id)
                        report.aborted_uploads.append(f"{s.name}:{key}")
        except (StoreUnreachable, StoreAuthError) as err:
            report.unreachable[s.name] = str(err)
    return report
