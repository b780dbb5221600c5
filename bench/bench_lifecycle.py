"""Benchmark: one reconcile pass over a ~128k-GPU fleet with nothing changed (target <= 1 s).

    python bench/bench_lifecycle.py            # 1,778 racks (128,016 GPUs), ~32k trays
    python bench/bench_lifecycle.py --quick    # 64 racks, CI smoke

Setup (not timed): a synthetic vr-nvl72 fleet is enrolled in a SQLite file; every rack and
tray is then set to production in bulk (the steady state; the bulk update bypasses the log
because only the pass is measured), the simulated plant has every shelf and tray on, and the
simulated Slurm knows every tray as a resumed node. Timed: `Controller.reconcile()`, which
reads the whole lifecycle table, observes every power target, CDU and Slurm node, and
compares. Baseline, same run: the bare SELECT of the lifecycle table, the floor any pass
pays. Figures are measured on this machine with simulated drivers (no real BMC/CDU I/O).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import update

from rackscale.fleet import Topology, synthetic_fleet
from rackscale.lifecycle import (
    Controller,
    LifecycleRow,
    SimCoolingDriver,
    SimPlant,
    SimPowerDriver,
    SimSlurm,
    enroll,
    node_name,
)
from rackscale.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 racks (CI smoke)")
    ap.add_argument("--racks", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    racks = args.racks or (64 if args.quick else 1778)

    t0 = time.perf_counter()
    topo = Topology.build(synthetic_fleet(racks))
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{Path(d) / 'bench.db'}")
        enroll(store, topo)
        with store.session() as s:
            s.execute(update(LifecycleRow).values(state="production"))
        plant = SimPlant.for_topology(topo)
        for t in plant.power:
            plant.power[t] = True
        trays = [t for t in plant.power if "/ps" not in t]
        slurm = SimSlurm([node_name(t) for t in trays])
        ctl = Controller(store, topo, SimPowerDriver(plant), SimCoolingDriver(plant),
                         slurm=slurm)
        setup_s = time.perf_counter() - t0
        first = ctl.reconcile()
        if first.changed:
            raise SystemExit(f"steady state not reached: {first.as_dict()}")

        def floor() -> float:
            t = time.perf_counter()
            with store.engine.connect() as conn:
                cur = conn.connection.cursor()
                cur.execute("SELECT component_id, state, goal, fault_since, fault_tier, rack "
                            "FROM lifecycle_state")
                rows = cur.fetchall()
                cur.close()
            if not rows:
                raise SystemExit("no lifecycle rows: enrollment failed")
            return time.perf_counter() - t

        passes, floors = [], []
        for _ in range(args.repeat):
            floors.append(floor())
            t = time.perf_counter()
            rep = ctl.reconcile()
            passes.append(time.perf_counter() - t)
            if rep.changed or slurm.commands:
                raise SystemExit(f"a quiet pass changed something: {rep.as_dict()}")
        store.close()

    gpus = len(topo.gpu_ids)
    med, best = statistics.median(passes), min(passes)
    base = statistics.median(floors)
    print(f"fleet: {racks} racks, {gpus} GPUs, {len(trays)} trays, "
          f"{len(plant.power)} power targets (setup {setup_s:.1f} s, not timed)")
    print(f"reconcile pass, nothing changed (measured, simulated drivers): median {med:.3f} s, "
          f"best {best:.3f} s over {args.repeat} passes; 0 commands, 0 writes")
    print(f"baseline (bare DBAPI fetch of the lifecycle table): median {base:.3f} s; "
          f"pass / baseline = {med / base:.1f}x")
    verdict = "PASS" if med <= 1.0 else "FAIL"
    print(f"target <= 1.0 s per pass: {verdict} ({med:.3f} s)")


if __name__ == "__main__":
    main()
