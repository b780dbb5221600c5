"""The one listing rule of committed checkpoints, shared by `rackscale checkpoint ls` and the
server's checkpoints API."""

from __future__ import annotations

from rackscale.checkpoint.errors import CheckpointError, StoreAuthError, StoreUnreachable
from rackscale.checkpoint.restore import Restorer
from rackscale.checkpoint.tiers import Tiers

DOWN = (StoreUnreachable, StoreAuthError)


def tier_presence(tiers: Tiers, r: Restorer, ckpt_id: str) -> dict[str, str]:
    """Per tier: yes (a manifest), no, bad (a manifest that does not check out), unreachable."""
    bad = r.bad_manifests.get(ckpt_id, {})
    out = {}
    for s in tiers.all:
        if s.name in bad:
            out[s.name] = "bad"
            continue
        try:
            out[s.name] = "yes" if s.head(tiers.layout.manifest(ckpt_id)) else "no"
        except DOWN:
            out[s.name] = "unreachable"
    return out


def catalog_of(tiers: Tiers, ckpt_id: str, notes: list[str]) -> dict:
    try:
        return tiers.read_catalog(ckpt_id) or {}
    except CheckpointError as err:  # history only: the listing goes on without it
        notes.append(str(err))
        return {}


def listing_rows(tiers: Tiers, r: Restorer, notes: list[str]) -> list[dict]:
    """The committed checkpoints as `checkpoint ls` and the server list them: state, RPO
    (staged to region) and which tiers hold each; a damaged one is a row that says why."""
    rows = []
    for ckpt_id in r.list_ids():
        cat = catalog_of(tiers, ckpt_id, notes)
        try:
            m, src, _ = r.manifest(ckpt_id)
        except CheckpointError as err:  # every copy damaged, or its only tier went away
            rows.append({"id": ckpt_id, "step": cat.get("step"), "bytes": None, "hash": None,
                         "algo": None, "state": "damaged", "states": cat.get("states", {}),
                         "rpo_s": None, "tiers": tier_presence(tiers, r, ckpt_id),
                         "errors": cat.get("errors", {}), "manifest_from": None,
                         "problem": str(err)})
            continue
        states = cat.get("states") or m.states
        rpo = states["region"] - states["staged"] if {"region", "staged"} <= set(states) else None
        rows.append({"id": ckpt_id, "step": m.step, "bytes": m.total_bytes, "hash": m.hash,
                     "algo": m.algo, "state": list(states)[-1] if states else "-",
                     "states": states, "rpo_s": rpo, "tiers": tier_presence(tiers, r, ckpt_id),
                     "errors": cat.get("errors", {}), "manifest_from": src})
    return rows
