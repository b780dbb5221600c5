"""Lab benchmarks: group testing against an all-pairs sweep, and busbw against the lab's nominal.

1. On the real lab (root, torch), with the same fault injected (a bad cable at a random NIC),
   the ladder's scale-out stage (group testing: leaf rings, bisection, spine rings) against an
   all-pairs sweep (every pair of ranks over the scale-out network, judged against the median
   pair; the part in every short pair is named: what pairwise sweeps do). Both run through
   the same LocalRunner with the same repeats and message size; both must name the same part.
   Figures: collective tests and wall time of each, and their ratio (MEASURED).
2. On the digital twin (SIMULATED: counts only): collective tests of the ladder's scale-out
   stage with one bad cable against all-pairs, n(n-1)/2 (computed), for labs of 2-16 lab-mini
   racks (8-64 ranks) and for fleets from 504 to ~128k GPUs.
3. Healthy lab: measured busbw of the NVLink-domain ring (one rack, NVLink), a leaf ring and a
   spine ring (NVLink off) against the lab's shaped nominal rate (goal: within 10%).

    PYTHONPATH=src python bench/bench_lab_ladder.py [--quick] [--racks N] [--json OUT]

`--racks N` builds the lab of N lab-mini racks (4 ranks each; default 2, the shipped lab) for
parts 1 and 3: the wall-time ratio grows with the rank count, as the test counts do.

Without root or torch the lab parts print a skip line (the twin part still runs).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rackscale import lab
from rackscale.certify import Ladder, LadderConfig, TwinBackend
from rackscale.certify.runners import LocalRunner, RunnerBackend, placement_from_places
from rackscale.certify.verdict import SHARED_CPU_THRESHOLDS, THRESHOLDS
from rackscale.faults import Fault, TwinHardware, faults_from
from rackscale.fleet import Topology, load_fleet, seed_fleet, synthetic_fleet
from rackscale.fleet.spec import FleetSpec

MESSAGE = 4 << 20
REPEATS = 3
WALL_RATIO_GOAL = 5.0
NOMINAL_GOAL = 0.9


def why_no_lab() -> str | None:
    reason = lab.why_not_here()
    if reason:
        return reason
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed"
    return None


def busbw_rel(nbytes: int, seconds: float, k: int, nominal_gbps: float) -> float:
    """nccl-tests bus bandwidth of one all-reduce as a share of the nominal link rate."""
    return nbytes / seconds / 1e9 * 2.0 * (k - 1) / k / nominal_gbps


def all_pairs(topo: Topology, runner: LocalRunner, nominal_gbps: float) -> dict:
    """Every pair of ranks, NVLink off, `REPEATS` times; a pair is short when its median is
    below the scale-out fail line (SHARED_CPU_THRESHOLDS) of the median pair. The GPU in
    every short pair is blamed (its NIC: bad_cable)."""
    ids = topo.gpu_ids
    pairs = [[ids[a], ids[b]] for a in range(len(ids)) for b in range(a + 1, len(ids))]
    t0 = time.perf_counter()
    rows = []
    for _ in range(REPEATS):  # disjoint pairs of one sweep run at once, as the runner allows
        res = runner.collectives(pairs, MESSAGE, False)
        rows.append([busbw_rel(MESSAGE, r.values["seconds"], 2, nominal_gbps) if r.ok
                     else 0.0 for r in res])
    wall = time.perf_counter() - t0
    med = np.median(np.asarray(rows), axis=0)
    ref = float(np.median(med))
    line = 1.0 - SHARED_CPU_THRESHOLDS["scaleout_allreduce"].min_drop
    short = [p for p, m in zip(pairs, med, strict=True) if m < line * ref]
    common = set(ids) if short else set()
    for p in short:
        common &= set(p)
    named = sorted(topo.ids[int(topo.gpu_nic[topo.gpu_number(g)])] for g in common)
    return {"tests": len(pairs), "runs": len(pairs) * REPEATS, "wall_s": wall,
            "named": [(n, "bad_cable") for n in named], "short_pairs": len(short)}


def ladder_scaleout(topo: Topology, runner: LocalRunner) -> dict:
    cfg = LadderConfig(repeats=REPEATS, message_bytes=MESSAGE, stages=(4,),
                       thresholds=dict(SHARED_CPU_THRESHOLDS))
    t0 = time.perf_counter()
    run = Ladder(topo, RunnerBackend(topo, runner), cfg).run()
    wall = time.perf_counter() - t0
    s = run.summary()
    return {"tests": s["collective_tests"], "runs": s["collective_runs"], "wall_s": wall,
            "named": sorted((f.component, f.kind) for f in run.findings)}


def stage_busbw(topo: Topology, runner: LocalRunner, plan: lab.LabPlan, reps: int) -> dict:
    """Healthy lab: busbw of one ring per stage against its shaped nominal rate."""
    ids = topo.gpu_ids
    rack0 = [g for i, g in enumerate(ids) if topo.gpu_rack[i] == 0]
    leaf0 = [g for i, g in enumerate(ids) if topo.gpu_leaf[i] == topo.gpu_leaf[0]]
    rail0 = [g for i, g in enumerate(ids) if topo.gpu_slot[i] == topo.gpu_slot[0]]
    so, nv = plan.so_mbit / 8000.0, plan.nv_mbit / 8000.0  # GB/s
    cases = {"nvlink_domain_ring": (rack0, True, nv), "leaf_ring": (leaf0, False, so),
             "spine_ring": (rail0, False, so)}
    out = {}
    for name, (members, nvlink, nominal) in cases.items():
        rels = []
        for _ in range(reps):
            (r,) = runner.collectives([members], MESSAGE, nvlink)
            if r.ok:
                rels.append(busbw_rel(MESSAGE, r.values["seconds"], len(members), nominal))
        out[name] = {"ranks": len(members), "nominal_gbps": nominal,
                     "median_rel": statistics.median(rels) if rels else 0.0,
                     "min_rel": min(rels) if rels else 0.0, "samples": len(rels),
                     "within_10pct": bool(rels) and statistics.median(rels) >= NOMINAL_GOAL}
    return out


def bench_lab(quick: bool, seed: int, racks: int = 2) -> dict:
    fleet = lab.default_fleet_path() if racks == 2 else None
    topo = Topology.build(load_fleet(fleet) if fleet else lab_fleet(racks))
    sd = Path(tempfile.mkdtemp(prefix="rackscale-bench-lab-")) / "state"
    load0 = os.getloadavg()[0]
    st = lab.up(topo, sd, fleet_file=fleet)
    try:
        domain_of = {g: topo.domains[int(topo.gpu_domain[i])] for i, g in enumerate(topo.gpu_ids)}
        runner = LocalRunner(placement_from_places(lab.rank_places(st.plan), "lab"), domain_of)
        try:
            runner.per_rank({"op": "cpu"}, list(topo.gpu_ids))  # start every agent first
            nominal = st.plan.so_mbit / 8000.0
            busbw = stage_busbw(topo, runner, st.plan, 3 if quick else 6)
            nic = random.Random(seed).choice(
                [i for i in topo.ids if i.rsplit("/", 1)[-1].startswith("nic")])
            lab.inject(sd, [Fault(target=nic, kind="bad_cable", severity=0.3)])
            try:
                ladder = ladder_scaleout(topo, runner)
                pairs = all_pairs(topo, runner, nominal)
            finally:
                lab.clear(sd)
        finally:
            runner.close()
    finally:
        lab.down(sd)
    expect = [(nic, "bad_cable")]
    return {"gpus": len(topo.gpu_ids), "racks": racks, "fault": expect[0], "ladder": ladder,
            "all_pairs": pairs,
            "same_answer": ladder["named"] == pairs["named"] == expect,
            "wall_ratio": pairs["wall_s"] / ladder["wall_s"],
            "test_ratio": pairs["tests"] / max(ladder["tests"], 1), "busbw": busbw,
            "load_avg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
            "measured": True}


def lab_fleet(racks: int) -> FleetSpec:
    """A lab of `racks` lab-mini racks, laid out like the shipped one (a leaf per rack and
    rail, one spine)."""
    return FleetSpec.model_validate({
        "name": f"minilab-{racks}", "regions": [{"name": "lab", "racks": [
            {"template": "lab-mini", "count": racks}]}],
        "network": {"racks_per_leaf": 1, "spines_per_region": 1}})


def bench_twin_counts(fleets: list[FleetSpec]) -> list[dict]:
    """Ladder collective tests with one bad cable on the twin, against n(n-1)/2."""
    out = []
    for racks, spec in enumerate(fleets):
        topo = Topology.build(spec)
        nics = [i for i, k in enumerate(topo.kinds) if k == "nic"]
        nic = topo.ids[int(np.random.default_rng(racks + 1).choice(nics))]
        ff = faults_from([Fault(target=nic, kind="bad_cable", severity=0.5)], topo)
        t0 = time.perf_counter()
        run = Ladder(topo, TwinBackend(TwinHardware(topo, ff, seed=racks + 1)),
                     LadderConfig(stages=(4,), thresholds=dict(THRESHOLDS))).run()
        n = len(topo.gpu_ids)
        tests = run.summary()["collective_tests"]
        out.append({"fleet": spec.name, "gpus": n, "ladder_tests": tests,
                    "allpairs_tests": n * (n - 1) // 2,
                    "ratio": n * (n - 1) / 2 / tests, "n_log2_n": n * math.log2(n),
                    "found": [(f.component, f.kind) for f in run.findings]
                    == [(nic, "bad_cable")], "wall_s": time.perf_counter() - t0,
                    "simulated": True})
    return out


def report(res: dict) -> bool:
    ok = True
    for row in res["twin_counts"]:
        print(f"twin (simulated) {row['gpus']:>7,} GPUs ({row['fleet']}): ladder "
              f"{row['ladder_tests']:>6,} "
              f"collective tests vs all-pairs {row['allpairs_tests']:>14,} (computed) = "
              f"{row['ratio']:>11,.0f}x fewer; tests / (n log2 n) = "
              f"{row['ladder_tests'] / row['n_log2_n']:.4f}; bad cable found: {row['found']}")
        ok &= row["found"]
    labres = res.get("lab")
    if labres is None:
        print(f"lab (measured): SKIPPED: {res['lab_skipped']}")
        return ok
    lad, ap = labres["ladder"], labres["all_pairs"]
    print(f"lab (measured, {labres['gpus']} CPU ranks, LocalRunner, {REPEATS} repeats, "
          f"{MESSAGE >> 20} MiB, load average {labres['load_avg_1min'][0]:.1f} at start, "
          f"{labres['load_avg_1min'][1]:.1f} at end), bad_cable at {labres['fault'][0]}:")
    print(f"  ladder (scale-out stage): {lad['tests']} collective tests, {lad['wall_s']:.1f} s"
          f" wall, named {lad['named']}")
    print(f"  all-pairs sweep:          {ap['tests']} collective tests, {ap['wall_s']:.1f} s "
          f"wall, named {ap['named']}")
    print(f"  same answer: {labres['same_answer']}; all-pairs / ladder = "
          f"{labres['test_ratio']:.1f}x tests, {labres['wall_ratio']:.1f}x wall time (goal >= "
          f"{WALL_RATIO_GOAL:.0f}x wall)")
    for name, b in labres["busbw"].items():
        print(f"  healthy {name} ({b['ranks']} ranks): busbw {b['median_rel']:.1%} of nominal "
              f"{b['nominal_gbps'] * 1000:.0f} MB/s (min {b['min_rel']:.1%}, {b['samples']} "
              f"runs; goal >= {NOMINAL_GOAL:.0%})")
    ok &= labres["same_answer"] and labres["wall_ratio"] >= WALL_RATIO_GOAL
    ok &= all(b["within_10pct"] for b in labres["busbw"].values())
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="CI smoke: fewer fleets and runs")
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--seed", type=int, default=None, help="where the fault goes (random)")
    ap.add_argument("--racks", type=int, default=2, choices=range(2, 17), metavar="N",
                    help="lab-mini racks of the measured lab (4 ranks each; default 2)")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.randrange(1 << 16)
    fleets = [lab_fleet(r) for r in (2, 4, 8, 16)] + [seed_fleet()] + [
        synthetic_fleet(r) for r in ((111,) if a.quick else (111, 444, 1778))]
    res: dict = {"seed": seed, "twin_counts": bench_twin_counts(fleets)}
    why = why_no_lab()
    if why:
        res["lab_skipped"] = why
    else:
        res["lab"] = bench_lab(a.quick, seed, a.racks)
    ok = report(res)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2, default=str), encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
