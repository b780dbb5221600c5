"""Which checkpoint a restarted job resumes from: the newest one a restore can serve whole.

A manifest in the region only says the save completed there once; an object deleted or
damaged since would fail every rank's load, and the job would stop instead of going back
one checkpoint. So each candidate, newest first, is verified (every object's size and every
chunk, region first, then the other tiers), and one that no tier holds intact is skipped
with the reason. A checkpoint already verified by this caller (same id and hash) is not
read again: objects are written once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rackscale.checkpoint.errors import ManifestInvalid
from rackscale.checkpoint.restore import Restorer
from rackscale.checkpoint.tiers import Tiers


@dataclass(slots=True)
class ResumePoint:
    id: str | None  # None: no checkpoint to resume, start afresh
    step: int = 0
    skipped: dict[str, str] = field(default_factory=dict)  # newer checkpoints passed over

    def describe_skipped(self) -> list[str]:
        return [f"checkpoint {cid} skipped: {why}" for cid, why in self.skipped.items()]


def _copy_problem(res: dict[str, Any]) -> str:
    detail = res.get("error") or ""
    if res["missing"]:
        detail = f"objects gone: {', '.join(res['missing'])}"
    elif res["bad_sizes"] or res["bad_chunks"]:
        bad = [f"{b['item']} (size {b['size']}, expected {b['expected']})"
               for b in res["bad_sizes"]] + [f"{b['item']} chunk {b['chunk']}"
                                             for b in res["bad_chunks"]]
        detail = f"damaged: {', '.join(bad)}"
    return f"{res['tier']} {res['status']}" + (f" ({detail})" if detail else "")


def resume_point(tiers: Tiers, verified: set[tuple[str, str]] | None = None) -> ResumePoint:
    """The newest checkpoint committed in the region tier (the tier every node reads) that
    some remote tier holds intact. An unreachable region raises (nothing can be decided);
    `verified` remembers (id, hash) of checkpoints that passed, across calls."""
    known = verified if verified is not None else set()
    out = ResumePoint(None)
    for ckpt_id in reversed(tiers.committed_ids(tiers.region)):
        try:
            m = tiers.read_manifest(tiers.region, ckpt_id)
        except ManifestInvalid as err:
            out.skipped[ckpt_id] = str(err)
            continue
        if m is None:  # deleted while we listed
            continue
        if (m.id, m.hash) in known:
            out.id, out.step = m.id, m.step
            return out
        r = Restorer(tiers)
        problems = []
        for store in tiers.remote:
            res = r.verify(ckpt_id, store)
            if res["ok"]:
                known.add((m.id, m.hash))
                out.id, out.step = m.id, m.step
                return out
            if res["status"] != "absent":
                problems.append(_copy_problem(res))
        out.skipped[ckpt_id] = "no tier holds an intact copy: " + "; ".join(problems)
    return out
