"""Loading a fleet's topology into the inventory: idempotent, and it says what changed.

Loading the same spec twice writes nothing. Loading a changed spec computes the difference
(components added, removed or changed; racks added or removed), applies it in one transaction
and logs one event per rack added or removed plus a `fleet.loaded` summary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, func, insert, inspect, select, update

from rackscale.fleet import RACK, FleetSpec, Topology
from rackscale.store.db import ConcurrentChange, NewEvent, Store, StoreError
from rackscale.store.events import Kind
from rackscale.store.schema import ComponentRow, FleetRow

_BATCH = 20_000
_RACE_RETRIES = 3


@dataclass(slots=True)
class LoadResult:
    fleet: str
    racks_added: list[str] = field(default_factory=list)
    racks_removed: list[str] = field(default_factory=list)
    components_added: int = 0
    components_removed: int = 0
    components_changed: int = 0
    total_components: int = 0
    # The spec itself differs from the stored one (e.g. a region's power budget) even when
    # no component row does: readers of the fleet row (lifecycle, report) must see it.
    spec_changed: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.components_added or self.components_removed or self.components_changed
                    or self.spec_changed)

    def as_dict(self) -> dict[str, Any]:
        return {"fleet": self.fleet, "changed": self.changed, "racks_added": self.racks_added,
                "racks_removed": self.racks_removed, "components_added": self.components_added,
                "components_removed": self.components_removed,
                "components_changed": self.components_changed,
                "spec_changed": self.spec_changed, "total_components": self.total_components}


def _rows(topo: Topology) -> dict[str, tuple[str, str | None, str, str | None, str | None]]:
    ids, kinds, parents, skus = topo.ids, topo.kinds, topo.parents, topo.skus
    regions = topo.regions
    rack_ids = [r.id for r in topo.racks]
    return {
        ids[i]: (
            kinds[i],
            ids[parents[i]] if parents[i] >= 0 else None,
            regions[topo.region_of[i]],
            rack_ids[topo.rack_of[i]] if topo.rack_of[i] >= 0 else None,
            skus[i],
        )
        for i in range(len(ids))
    }


class FleetMismatch(StoreError):
    """The store holds another fleet; loading this one would delete it."""


def load_topology(store: Store, topo: Topology, *, actor: str = "rackscale",
                  reason: str = "fleet load", replace: bool = False,
                  progress: Callable[[int, int], None] | None = None) -> LoadResult:
    """Make the inventory match `topo`. `progress(done, total)` is called as rows are written.

    A store that holds another fleet is left alone unless `replace`: its components would be
    deleted, and that must be asked for, never a side effect of a typo in a spec's name.
    Two loads at once are safe: the one that loses the race reads again and finds the rows
    there (a load is idempotent), so it retries a few times before it reports the race."""
    for _ in range(_RACE_RETRIES - 1):
        with contextlib.suppress(ConcurrentChange):
            return _load_once(store, topo, actor=actor, reason=reason, replace=replace,
                              progress=progress)
    return _load_once(store, topo, actor=actor, reason=reason, replace=replace,
                      progress=progress)


def _load_once(store: Store, topo: Topology, *, actor: str, reason: str, replace: bool,
               progress: Callable[[int, int], None] | None) -> LoadResult:
    want = _rows(topo)
    result = LoadResult(fleet=topo.spec.name, total_components=len(want))
    with store.session() as s:
        others = [f for f in s.scalars(select(FleetRow)) if f.name != topo.spec.name]
        if others and not replace:
            count = s.scalar(select(func.count()).select_from(ComponentRow)) or 0
            names = ", ".join(sorted(f.name for f in others))
            raise FleetMismatch(
                f"{store.safe_url} holds fleet {names} ({count} components); loading fleet "
                f"{topo.spec.name} would delete them. Pass --replace to replace it (its event "
                "history is kept), or give another --db for the second fleet")
        for f in others:
            s.delete(f)
        have = {
            r.id: (r.kind, r.parent, r.region, r.rack, r.sku)
            for r in s.execute(select(ComponentRow.id, ComponentRow.kind, ComponentRow.parent,
                                      ComponentRow.region, ComponentRow.rack, ComponentRow.sku))
        }
        added = [cid for cid in want if cid not in have]
        removed = [cid for cid in have if cid not in want]
        changed = [cid for cid, row in want.items() if cid in have and have[cid] != row]
        result.components_added = len(added)
        result.components_removed = len(removed)
        result.components_changed = len(changed)
        result.racks_added = sorted(c for c in added if want[c][0] == RACK)
        result.racks_removed = sorted(c for c in removed if have[c][0] == RACK)
        fleet_row = s.get(FleetRow, topo.spec.name)
        spec = topo.spec.model_dump(mode="json")
        result.spec_changed = fleet_row is None or fleet_row.spec != spec or bool(others)
        if not result.changed:
            return result
        total = len(added) + len(removed) + len(changed)
        done = 0
        for lo in range(0, len(removed), _BATCH):
            batch = removed[lo:lo + _BATCH]
            s.execute(delete(ComponentRow).where(ComponentRow.id.in_(batch)))
            done += len(batch)
            if progress:
                progress(done, total)
        for lo in range(0, len(added), _BATCH):
            batch = added[lo:lo + _BATCH]
            s.execute(insert(ComponentRow), [
                {"id": c, "kind": want[c][0], "parent": want[c][1], "region": want[c][2],
                 "rack": want[c][3], "sku": want[c][4],
                 "attributes": topo.attributes(topo.index[c]) or None}
                for c in batch
            ])
            done += len(batch)
            if progress:
                progress(done, total)
        for c in changed:
            kind, parent, region, rack, sku = want[c]
            s.execute(update(ComponentRow).where(ComponentRow.id == c).values(
                kind=kind, parent=parent, region=region, rack=rack, sku=sku,
                attributes=topo.attributes(topo.index[c]) or None))
        if progress:
            progress(total, total)
        now = datetime.now(UTC)
        events = [NewEvent(component_id=c, kind=Kind.RACK_ADDED, actor=actor, reason=reason,
                           payload={"template": want[c][4]}, time=now)
                  for c in result.racks_added]
        events += [NewEvent(component_id=c, kind=Kind.RACK_REMOVED, actor=actor,
                            reason=reason, time=now) for c in result.racks_removed]
        events.append(NewEvent(component_id=topo.spec.name, kind=Kind.FLEET_LOADED, actor=actor,
                               reason=reason, payload=result.as_dict(), time=now))
        store.append_events(events, session=s)
        if fleet_row is None:
            s.add(FleetRow(name=topo.spec.name, spec=spec, loaded_at=now))
        else:
            fleet_row.spec = spec
            fleet_row.loaded_at = now
    return result


def loaded_spec(store: Store) -> FleetSpec | None:
    """The fleet most recently loaded into `store` (the one its inventory matches), or None.
    Commands that take `--fleet` default to it."""
    if not inspect(store.engine).has_table(FleetRow.__tablename__):
        return None  # a read-only store that never had a fleet loaded
    with store.session() as s:
        row = s.scalars(select(FleetRow).order_by(FleetRow.loaded_at.desc())).first()
    return None if row is None else FleetSpec.model_validate(row.spec)
