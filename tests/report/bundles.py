"""Report bundles for the statement tests: a real store with contract events, a built
report (evidence, disclosure), and a signing key made by `keygen`."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.fleet import FleetSpec, Topology, parse_fleet, seed_fleet
from rackscale.report import JobShape, build_report
from rackscale.report.sign import keygen, sign_bundle
from rackscale.store import NewEvent, Store, load_topology

from .events import SEED_FAULTS, certify, onboard, simulate, walk

MIXED = """\
name: mixed-fleet
regions:
  - name: eu-north
    racks:
      - {template: gb200-nvl72, names: [row-a, row-b, row-c]}
      - {template: hgx-h100, count: 3, nodes_per_rack: 4}
  - name: eu
    racks: [{template: vr-nvl72, count: 2}]
"""


@dataclass(slots=True)
class Bundle:
    dir: Path
    key: Path
    pub: Path
    doc: dict[str, Any]
    counts: dict[str, float]


def mixed_fleet() -> FleetSpec:
    return parse_fleet(MIXED, "<mixed>")


def populate(store: Store, topo: Topology, *, faults: list[dict[str, Any]] | None = None,
             run_id: str = "c-0001", ettr: float = 0.93, extra_lifecycle: bool = False) -> None:
    onboard(store, topo)
    if extra_lifecycle:  # a rack in maintenance and a tray in triage
        rack = topo.racks[-1].id
        walk(store, rack, ["degraded", "maintenance"], start="production")
        tray = f"{topo.racks[0].id}/c02" if f"{topo.racks[0].id}/c02" in topo.index else None
        if tray:
            store.append_events([NewEvent(component_id=tray, kind="lifecycle.transition",
                                          payload={"from": "production", "to": "triage"})])
    certify(store, topo, faults if faults is not None else [], run_id=run_id)
    simulate(store, topo, ettr=ettr)


def make_bundle(tmp: Path, spec: FleetSpec | None = None, *, name: str = "report",
                faults: list[dict[str, Any]] | None = None, sign: bool = True,
                shape: JobShape | None = None, price: float | None = None,
                key: Path | None = None, **kw: Any) -> Bundle:
    topo = Topology.build(spec or seed_fleet("seed-504"))
    db = tmp / f"{name}.db"
    store = Store(f"sqlite:///{db}")
    try:
        load_topology(store, topo, actor="test", reason="statement tests")
        populate(store, topo, faults=SEED_FAULTS if faults is None else faults, **kw)
        built = build_report(store, tmp / name, shape=shape, gpu_hour_price=price)
    finally:
        store.close()
    # The store is gone: whatever verifies next works from the bundle alone.
    for f in tmp.glob(f"{name}.db*"):
        f.unlink()
    if key is None:
        key = tmp / "keys" / "signing.pem"
        if not key.exists():
            keygen(key)
    if sign:
        sign_bundle(tmp / name, key)
    return Bundle(dir=tmp / name, key=key, pub=key.with_name(key.name + ".pub"),
                  doc=built.doc, counts={s.key: s.count for s in built.ledger.steps})


def copy_of(bundle: Bundle, dst: Path) -> Path:
    shutil.copytree(bundle.dir, dst)
    return dst
