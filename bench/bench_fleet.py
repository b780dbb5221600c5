"""Fleet benchmarks: topology build and SQLite load of the ~128k-GPU design target.

Each figure is printed beside a baseline measured in the same run on the same machine:
- topology build vs. the bare cost of formatting the same component id strings in a list
  comprehension (the least work any builder must do);
- inventory load vs. raw sqlite3 executemany of the same rows into an equivalent table
  (no ORM, no diff).
Targets (issue 2): build <= 10 s wall and <= 2 GiB peak RSS; load <= 60 s.

    python bench/bench_fleet.py [--quick] [--racks N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time


def _child_build(racks: int) -> None:
    """Runs in a fresh process so peak RSS is the build's own, not the parent's."""
    from rackscale.fleet import Topology, synthetic_fleet

    t0 = time.perf_counter()
    topo = Topology.build(synthetic_fleet(racks))
    wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids = [f"region-{r % 2}/r{r:04d}/c{c:02d}/part{p}" for r in range(racks)
           for c in range(1, 19) for p in range(14)]
    base = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024
    print(json.dumps({"wall_s": wall, "baseline_s": base, "peak_rss_gib": rss,
                      "components": len(topo), "gpus": len(topo.gpu_ids), "ids": len(ids)}))


def bench_build(racks: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child-build", str(racks)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_load(racks: int) -> dict:
    from rackscale.fleet import Topology, synthetic_fleet
    from rackscale.store import Store, load_topology

    topo = Topology.build(synthetic_fleet(racks))
    with tempfile.TemporaryDirectory() as d:
        store = Store(f"sqlite:///{d}/bench.db")
        t0 = time.perf_counter()
        res = load_topology(store, topo)
        load = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = load_topology(store, topo)
        reload = time.perf_counter() - t0
        store.close()
        assert res.components_added == len(topo) and not again.changed
        # Baseline: raw sqlite3, same rows, same journal mode, one transaction.
        conn = sqlite3.connect(os.path.join(d, "raw.db"))
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("CREATE TABLE c (id TEXT PRIMARY KEY, kind TEXT, parent TEXT, region TEXT,"
                     " rack TEXT, sku TEXT, attributes TEXT)")
        for col in ("kind", "parent", "region", "rack"):
            conn.execute(f"CREATE INDEX ix_{col} ON c ({col})")
        rows = [(topo.ids[i], topo.kinds[i],
                 topo.ids[topo.parents[i]] if topo.parents[i] >= 0 else None,
                 topo.regions[topo.region_of[i]],
                 topo.racks[topo.rack_of[i]].id if topo.rack_of[i] >= 0 else None,
                 topo.skus[i], None) for i in range(len(topo))]
        t0 = time.perf_counter()
        with conn:
            conn.executemany("INSERT INTO c VALUES (?,?,?,?,?,?,?)", rows)
        raw = time.perf_counter() - t0
        conn.close()
    return {"load_s": load, "reload_noop_s": reload, "raw_sqlite_s": raw,
            "components": len(topo)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 racks instead of 1,778")
    ap.add_argument("--racks", type=int, default=None)
    ap.add_argument("--child-build", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_build is not None:
        _child_build(args.child_build)
        return
    racks = args.racks or (100 if args.quick else 1778)
    print(f"fleet benchmarks: {racks} vr-nvl72 racks ({racks * 72:,} GPUs), "
          f"{os.cpu_count()} CPUs")
    b = bench_build(racks)
    print(f"topology build : {b['wall_s']:6.2f} s wall, peak RSS {b['peak_rss_gib']:.2f} GiB, "
          f"{b['components']:,} components  (target <= 10 s, <= 2 GiB)")
    print(f"  baseline: formatting {b['ids']:,} id strings alone: {b['baseline_s']:.2f} s "
          f"-> build/baseline = {b['wall_s'] / b['baseline_s']:.1f}x")
    ld = bench_load(racks)
    print(f"sqlite load    : {ld['load_s']:6.2f} s  (target <= 60 s); "
          f"reload with no change: {ld['reload_noop_s']:.2f} s")
    print(f"  baseline: raw sqlite3 executemany of the same rows: {ld['raw_sqlite_s']:.2f} s "
          f"-> load/baseline = {ld['load_s'] / ld['raw_sqlite_s']:.1f}x")
    ok = b["wall_s"] <= 10 and b["peak_rss_gib"] <= 2 and ld["load_s"] <= 60
    print("result:", "within targets" if ok else "OUTSIDE TARGETS")


if __name__ == "__main__":
    main()
