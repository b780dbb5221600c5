"""Benchmark the storage profile and the storage what-if (times measured on this machine).

1. `checkpoint profile` on the default tiers (directories under a temporary data dir): wall
   time of a profile at 64 MiB per node, 3 runs per figure (the figures themselves are
   measured on this machine's disk and printed).
2. `simulate storage-whatif` for a 128,000-GPU job x 30 days x 100 trials x 4 setups
   (goal: <= 10 s), at the default 7 checkpoint intervals, with the profile of step 1 scaled
   to a 5 TB checkpoint. The ETTR figures are simulated.

    python bench/bench_storage.py           # full
    python bench/bench_storage.py --quick   # CI smoke: 8 MiB profile, a 16k-GPU job
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

from rackscale.checkpoint import default_config, measure_profile
from rackscale.fleet import synthetic_fleet
from rackscale.simulate import FleetShape, make_config, plan, scale_fits, storage_whatif

MiB = 1 << 20
GOAL_S = 10.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    size, racks, job = (8 * MiB, 256, 16_384) if args.quick else (64 * MiB, 1800, 128_000)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start "
          "(shared)")
    work = tempfile.mkdtemp(prefix="bench-storage-")
    try:
        t0 = time.perf_counter()
        prof = measure_profile(default_config(work), [size], reps=3)
        wall = time.perf_counter() - t0
    finally:
        shutil.rmtree(work, ignore_errors=True)
    pt = prof.points[-1]
    print(f"\n[1] checkpoint profile, default tiers (directories), {size // MiB} MiB + 64 KiB "
          f"probe, 3 runs per figure: {wall:.2f} s wall")
    print(f"    measured at {size // MiB} MiB: stall {pt.save.stall.seconds * 1e3:.1f} ms, "
          f"durable local {pt.save.local.seconds:.3f} s, region {pt.save.region.seconds:.3f} s,"
          f" replicated {pt.save.replicated.seconds:.3f} s; restore local "
          f"{pt.restore['local'].seconds:.3f} s, region {pt.restore['us-east'].seconds:.3f} s")

    fleet = FleetShape.from_spec(synthetic_fleet(racks))
    cfg = make_config(job_gpus=job, days=30, trials=100, seed=1,
                      straggler_ratio=0)
    p = plan(cfg, fleet)
    nodes = p.units_job * (p.unit_trays - p.spare_trays)
    st = scale_fits(prof.fits(), 5 * 10**12 // nodes, region_loss_per_year=1.0,
                    source="bench profile")
    intervals = [5, 10, 15, 20, 30, 45, 60]
    t0 = time.perf_counter()
    cpu0 = time.process_time()
    out = storage_whatif(cfg, fleet, st, intervals)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    ok = wall <= GOAL_S
    print(f"\n[2] storage what-if, {p.job_gpus_alloc} GPUs x 30 days x 100 trials x 4 setups x "
          f"{len(intervals)} intervals: {wall:.2f} s wall ({cpu:.2f} s CPU) -> "
          f"{'PASS' if ok else 'FAIL'} (goal <= {GOAL_S:g} s)")
    for name, s in out["setups"].items():
        print(f"    {name:18s} best interval {s['optimal_interval_min']:g} min, ETTR "
              f"{s['optimal_ettr']['mean']:.4f} ± {s['optimal_ettr']['ci95']:.4f} (simulated); "
              f"Young/Daly {s['young_min']:.1f}/{s['daly_min']:.1f} min")
    for what, v in out["buys_per_month"].items():
        print(f"    {what}: {v['gpu_hours']['mean']:,.0f} ± {v['gpu_hours']['ci95']:,.0f} "
              "GPU-h/month (simulated)")
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
