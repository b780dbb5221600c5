"""Benchmark: report build time against fleet size, with the store read as the baseline.

For each fleet (the seed fleet, then synthetic NVL72 fleets) the store gets the inventory,
a full onboarding in lifecycle events, a certification run with findings and results, and a
simulation run, all as contract events. Then the report is built and timed by phase:
collect (reading the store: the floor every report pays), ledger, document, HTML (with
plots), write. Ratios are against the collect time measured in the same run.

    python bench/bench_report.py                     # 504, 36,864 and 128,016 GPUs
    python bench/bench_report.py --quick             # seed and 32 racks (CI smoke)
    python bench/bench_report.py --stores DIR        # keep (and reuse) the filled stores
    python bench/bench_report.py --stores DIR --racks 1778 --repeats 5   # 128k only

Filling the 128k store (1.3M inventory rows, 178k events) takes minutes; with `--stores` it
is filled once and later runs time the report alone. Goals at 128,016 GPUs: build <= 5 s,
report.html <= 2 MB.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from rackscale.fleet import Topology, seed_fleet, synthetic_fleet
from rackscale.report import build_document, build_ledger, collect, render_html
from rackscale.store import Store, load_topology
from report.events import certify, onboard, simulate


def faults_for(topo: Topology) -> list[dict]:
    """One slow GPU per 8 racks and one switch-tray finding per 16: a realistic sprinkle."""
    out = []
    for r in topo.racks[::8]:
        out.append({"component": f"{r.id}/c05/gpu1", "kind": "slow_gpu", "verdict": "fail",
                    "stage": 1, "evidence": {"tflops": 30.1}, "confidence": 0.95})
    for r in topo.racks[3::16]:
        out.append({"component": f"{r.id}/s02", "kind": "nvlink_switch_down", "verdict": "fail",
                    "stage": 3, "evidence": {}, "confidence": 0.99})
    return out


def _filled(path: Path, topo: Topology) -> tuple[Store, float]:
    """The store at `path`, filled with the fleet's events unless a previous run did."""
    fresh = not path.exists()
    store = Store(f"sqlite:///{path}")
    t0 = time.perf_counter()
    if fresh or store.count_events(kind_prefix="simulate.") == 0:
        load_topology(store, topo)
        onboard(store, topo)
        certify(store, topo, faults_for(topo))
        simulate(store, topo)
    return store, time.perf_counter() - t0


def bench(name: str, topo: Topology, repeats: int, stores: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        store, setup = _filled((stores or Path(tmp)) / f"{name}.db", topo)
        best: dict[str, float] = {}
        for _ in range(repeats):
            t = {}
            cpu0 = time.process_time()
            t0 = time.perf_counter()
            view = collect(store)
            t["collect"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ledger = build_ledger(view)
            t["ledger"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            doc = build_document(view, ledger)
            t["document"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            html = render_html(doc)
            t["html"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            Path(tmp, "report.html").write_text(html)
            Path(tmp, "report.json").write_text(json.dumps(doc, allow_nan=False))
            t["write"] = time.perf_counter() - t0
            t["total"] = sum(t.values())
            # CPU seconds of this process: on a shared machine wall time also counts the
            # other jobs' turns on the cores; CPU time is the report's own work.
            t["cpu"] = time.process_time() - cpu0
            # The best repeat by CPU seconds: on a loaded machine the wall time mostly
            # measures the other jobs.
            best = t if not best or t["cpu"] < best["cpu"] else best
        events = store.count_events()
        html_kb = len(html.encode()) / 1024
        store.close()
    return {"fleet": name, "gpus": len(topo.gpu_ids), "events": events, "setup_s": setup,
            "html_kb": html_kb, "usable": ledger.steps[-2].count, **best}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seed fleet and 32 racks only")
    ap.add_argument("--stores", type=Path, default=None,
                    help="directory to keep the filled stores in and reuse them from")
    ap.add_argument("--racks", type=int, nargs="*", default=None,
                    help="synthetic fleet sizes in racks (default 512 1778); the seed fleet "
                    "is always first")
    ap.add_argument("--repeats", type=int, default=3, help="builds per fleet, best by CPU")
    args = ap.parse_args()
    if args.stores:
        args.stores.mkdir(parents=True, exist_ok=True)
    fleets = [("seed-504", Topology.build(seed_fleet()))]
    sizes = [32] if args.quick else (args.racks if args.racks is not None else [512, 1778])
    fleets += [(f"synthetic-{n}", Topology.build(synthetic_fleet(n))) for n in sizes]
    print(f"{'fleet':<15}{'GPUs':>8}{'events':>9}{'collect s':>11}{'ledger s':>10}"
          f"{'doc s':>8}{'html s':>8}{'write s':>9}{'total s':>9}{'CPU s':>8}{'x collect':>11}"
          f"{'html KiB':>10}")
    for name, topo in fleets:
        r = bench(name, topo, repeats=1 if args.quick else args.repeats, stores=args.stores)
        print(f"{r['fleet']:<15}{r['gpus']:>8}{r['events']:>9}{r['collect']:>11.3f}"
              f"{r['ledger']:>10.3f}{r['document']:>8.3f}{r['html']:>8.3f}{r['write']:>9.3f}"
              f"{r['total']:>9.3f}{r['cpu']:>8.3f}{r['total'] / r['collect']:>11.2f}"
              f"{r['html_kb']:>10.0f}")


if __name__ == "__main__":
    main()
