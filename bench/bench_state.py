"""Benchmark: the fleet state (conditions per part) read from a ~128k-GPU fleet's event log.

    python bench/bench_state.py            # 1,778 racks (128,016 GPUs)
    python bench/bench_state.py --quick    # 64 racks, CI smoke

Setup (not timed): a synthetic vr-nvl72 fleet is enrolled in a SQLite file (a lifecycle
transition per rack and tray), then one certification run on the digital twin with a faults
sprinkle (a slow GPU every 8 racks, a switch tray every 16) stores its findings and a result
per tray and rack. Timed:
- rebuild: `FleetState.load` (the read of every certify and lifecycle event, each parsed
  through its payload model, folded into conditions). Baseline, same run: the bare
  `store.events` read of the same events, the floor any reader pays. Goal <= 5 s.
- from its snapshot: `FleetState.load` once a load has left the persisted snapshot (the rebuild
  above runs with snapshots off, so it is the whole fold); printed as a ratio to the rebuild.
- incremental: one new finding appended, then `FleetState.refresh` (the query after the
  cursor and the fold of that one event). Baseline: the same query alone. Goal <= 10 ms.
Figures are measured on this machine; the certification run is simulated (digital twin).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from rackscale.certify import Ladder, LadderConfig, TwinBackend, store_run
from rackscale.faults import Fault, TwinHardware, faults_from
from rackscale.fleet import Topology, synthetic_fleet
from rackscale.lifecycle import enroll
from rackscale.state import FOLDED_KINDS, FleetState, snapshot
from rackscale.store import Kind, Store

REBUILD_GOAL_S = 5.0
INCREMENT_GOAL_S = 0.010


def _fill(store: Store, topo: Topology) -> None:
    enroll(store, topo)
    faults = [Fault(target=f"{r.id}/c05/gpu1", kind="slow_gpu", severity=0.8)
              for r in topo.racks[::8]]
    faults += [Fault(target=f"{r.id}/s02", kind="nvlink_switch_down") for r in topo.racks[3::16]]
    hw = TwinHardware(topo, faults_from(faults, topo), seed=7)
    run = Ladder(topo, TwinBackend(hw), LadderConfig(), seed=7).run()
    store_run(store, fleet=topo.spec.name, run=run.summary(), findings=run.findings,
              results=run.results)


def _median(f, n: int) -> float:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="64 racks (CI smoke)")
    ap.add_argument("--racks", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    racks = args.racks or (64 if args.quick else 1778)
    topo = Topology.build(synthetic_fleet(racks))
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{Path(d) / 'bench.db'}")
        t0 = time.perf_counter()
        _fill(store, topo)
        events = len(store.events(kinds=FOLDED_KINDS))
        print(f"fleet: {len(topo.gpu_ids):,} GPUs, {len(topo.racks):,} racks; {events:,} "
              f"certify and lifecycle events (setup {time.perf_counter() - t0:.1f} s)")
        floor = _median(lambda: store.events(kinds=FOLDED_KINDS), args.repeat)
        every = FleetState.SNAPSHOT_EVERY
        FleetState.SNAPSHOT_EVERY = 10**12  # the whole fold: no snapshot written or there
        rebuild = _median(lambda: FleetState.load(store, topo), args.repeat)
        FleetState.SNAPSHOT_EVERY = every
        t = time.perf_counter()
        state = FleetState.load(store, topo)  # folds the log and leaves its snapshot
        with_write = time.perf_counter() - t
        if events >= every and snapshot.read(store, topo) is None:
            raise SystemExit("the load did not leave a snapshot")
        restored = _median(lambda: FleetState.load(store, topo), args.repeat)
        steps, queries = [], []
        for i in range(args.repeat * 4):
            gpu = topo.gpu_ids[(i * 7919) % len(topo.gpu_ids)]
            store.append_event(gpu, Kind.CERTIFY_FINDING, {
                "component": gpu, "kind": "gpu_dead", "stage": 1, "evidence": {},
                "confidence": 0.9, "run_id": f"bench-{i}", "backend": "twin"})
            seq = state.seq
            t = time.perf_counter()
            store.events(after_seq=seq)
            queries.append(time.perf_counter() - t)
            t = time.perf_counter()
            if state.refresh(store) != 1:
                raise SystemExit("the refresh did not read exactly the one new event")
            steps.append(time.perf_counter() - t)
        if state.failing(topo.holder(gpu).tray or "") is None:
            raise SystemExit("the last finding did not fail its tray")
        inc, q = statistics.median(steps), statistics.median(queries)
    print(f"rebuild from scratch: {rebuild:.3f} s (measured) = {rebuild / floor:.2f}x the bare "
          f"read of the same events ({floor:.3f} s); goal <= {REBUILD_GOAL_S:g} s")
    print(f"incremental, one event: {inc * 1000:.2f} ms (measured) = {inc / q:.2f}x the bare "
          f"query after the cursor ({q * 1000:.2f} ms); goal <= {INCREMENT_GOAL_S * 1000:g} ms")
    print(f"from its snapshot: {restored:.3f} s (measured) = {restored / rebuild:.2f}x the "
          f"rebuild; the load that folds the log and writes the snapshot: {with_write:.3f} s")
    missed = [name for name, ok in (("rebuild", rebuild <= REBUILD_GOAL_S),
                                    ("incremental", inc <= INCREMENT_GOAL_S)) if not ok]
    if missed:
        raise SystemExit(f"goal missed: {', '.join(missed)}")


if __name__ == "__main__":
    main()
