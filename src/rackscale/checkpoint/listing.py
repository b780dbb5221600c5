"""The one listing rule of committed checkpoints, shared by `rackscale checkpoint ls` and the
server's checkpoints API."""

from __future__ import annotations

from functools import partial
from typing import Any

from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.manifest import ORDER, CkptState, Manifest, current_state
from rackscale.checkpoint.objectstore import ObjectStore
from rackscale.checkpoint.restore import Restorer
from rackscale.checkpoint.tiers import Tiers


def tier_presence(tiers: Tiers, r: Restorer, ckpt_id: str,
                  m: Manifest | None = None) -> dict[str, str]:
    """Per tier: yes (its manifest and every object of `m`), missing (a manifest, but an
    object of `m` is gone: what `verify` calls missing), no, bad (a manifest that does not
    check out), unreachable. One listing per tier; a tier already down is not asked."""
    bad = r.bad_manifests.get(ckpt_id, {})
    layout = tiers.layout
    out = {}
    for s in tiers.all:
        if s.name in bad:
            out[s.name] = "bad"
            continue
        keys = r.ask(s, partial(_keys, s, layout.ckpt_prefix(ckpt_id)))
        if keys is None:
            out[s.name] = "unreachable"
        elif layout.manifest(ckpt_id) not in keys:
            out[s.name] = "no"
        elif m is not None and any(layout.data(ckpt_id, it.name) not in keys
                                   for it in m.items):
            out[s.name] = "missing"
        else:
            out[s.name] = "yes"
    return out


def _keys(store: ObjectStore, prefix: str) -> set[str]:
    return set(store.list(prefix))


def catalog_of(tiers: Tiers, ckpt_id: str, notes: list[str]) -> dict[str, Any]:
    try:
        return tiers.read_catalog(ckpt_id) or {}
    except CheckpointError as err:  # history only: the listing goes on without it
        notes.append(str(err))
        return {}


def furthest_state(tiers: Tiers, states: dict[str, float],
                   presence: dict[str, str]) -> str:
    """The furthest state a checkpoint reached, by the state order (not by key order: a
    manifest stores its states with sorted keys, where "staged" sorts last). A node without
    the saver's catalog reads the states of one tier's manifest, which stop at that tier; the
    tiers that hold a whole copy say how far it went beyond."""
    reached = [st for st in (current_state(states),) if st is not None]
    held = {name for name, p in presence.items() if p == "yes"}
    if tiers.region.name in held:
        reached.append(CkptState.REGION)
    if tiers.replicas and {r.name for r in tiers.replicas} <= held:
        reached.append(CkptState.REPLICATED)
    if tiers.archive is not None and tiers.archive.name in held:
        reached.append(CkptState.ARCHIVED)
    return max(reached, key=ORDER.index).value if reached else "-"


def listing_rows(tiers: Tiers, r: Restorer, notes: list[str]) -> list[dict[str, Any]]:
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
        presence = tier_presence(tiers, r, ckpt_id, m)
        rows.append({"id": ckpt_id, "step": m.step, "bytes": m.total_bytes, "hash": m.hash,
                     "algo": m.algo, "state": furthest_state(tiers, states, presence),
                     "states": states, "rpo_s": rpo, "tiers": presence,
                     "errors": cat.get("errors", {}), "manifest_from": src})
    return rows
