"""The simulator checked against soaks: measured ETTR against the simulator's prediction.

Runs N soaks (`rackscale job soak --json`, the CLI as its own process) on a lab it brings up
and tears down, each at a different fault count over the same duration (so at a different
fault rate), and sets each soak's measured ETTR (MEASURED, with its 95% interval) against the
simulator's prediction for it (SIMULATED: the simulator's engine fed the schedule's failure
rates, the soak's job shape and window, and its measured recovery costs; `soak.json`'s
`predicted`). The baseline is the measurement itself: the difference is predicted - measured,
in percentage points. Goal: every prediction inside the measured 95% interval, or within
3 pp; for each one that is not, the badput groups whose simulated and measured figures part
name the assumption that differs.

    PYTHONPATH=src python bench/bench_soak.py [--soaks 3] [--faults 1,2,4] [--duration-min 6]
                                              [--quick] [--seed 0] [--json OUT]
    PYTHONPATH=src python bench/bench_soak.py --tabulate DIR/soak.json ... [--json OUT]

`--tabulate` builds the table from soaks already run (each `soak.json` with its
`schedule.json` beside it) and needs no lab. Running soaks needs root, tc and torch (the lab);
without them it exits 2 with the reason. A lab run is timing-sensitive: run nothing else
heavy beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rackscale import lab
from rackscale.fleet import Topology, load_fleet
from rackscale.soak import differing, from_dict, verdict
from rackscale.soak.predict import predict
from rackscale.soak.schedule import START_ALLOW_S

GOAL_PP = 3.0
JOB_GPUS, SPARES = 4, 4  # the shipped lab's 8 GPU slots: each fault takes a spare
WARMUP_S, HOLD_S, SETTLE_S = 15.0, 25.0, 25.0  # job soak's defaults (schedule.draw)


def why_no_lab() -> str | None:
    reason = lab.why_not_here()
    if reason:
        return reason
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed (pip install 'rackscale[torch]')"
    return None


def most_faults(duration_s: float) -> int:
    """The most faults a soak of this length holds (each one held and recovered before the
    next) with a spare for each."""
    room = duration_s - START_ALLOW_S - WARMUP_S
    return max(0, min(SPARES, int(room // (HOLD_S + SETTLE_S))))


def fault_counts(soaks: int, duration_s: float, given: str | None) -> list[int]:
    top = most_faults(duration_s)
    if given:
        counts = [int(x) for x in given.split(",") if x.strip()]
    else:  # spread from 1 to the most the duration holds
        counts = sorted({max(1, round(1 + i * (top - 1) / max(1, soaks - 1)))
                         for i in range(soaks)})
    if not counts or any(c < 1 or c > top for c in counts):
        raise SystemExit(f"bench_soak: fault counts {counts}: a soak of {duration_s / 60:g} min "
                         f"with {SPARES} spares holds 1..{top} faults; give fewer with "
                         "--faults or a longer --duration-min")
    return counts


def run_soak(labdir: Path, out: Path, faults: int, seed: int, duration_min: float) -> Path:
    """One soak through the CLI; its soak.json."""
    db = out.parent / "bench-soak.db"
    cmd = [sys.executable, "-m", "rackscale", "job", "soak", "--lab", str(labdir),
           "--duration-min", str(duration_min), "--fault-count", str(faults), "--seed",
           str(seed), "--job-gpus", str(JOB_GPUS), "--spares", str(SPARES), "--out", str(out),
           "--db", f"sqlite:///{db}", "--json"]
    print(f"soak: {faults} faults, seed {seed}, {duration_min:g} min ...", flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=duration_min * 60 + 300, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench_soak: the soak of {faults} faults failed (exit "
                         f"{done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return out / "soak.json"


def row(soak_json: Path) -> dict[str, Any]:
    """One soak's measured ETTR against its prediction (recomputed if soak.json has none)."""
    r = json.loads(soak_json.read_text(encoding="utf-8"))
    sched = from_dict(json.loads((soak_json.parent / "schedule.json").read_text(
        encoding="utf-8")))
    p = r.get("predicted") or {}
    if p.get("ettr") is None:
        p = predict(r, sched, ckpt_every=r["job"].get("ckpt_every", 10))
    v = verdict(r, p)
    return {"soak": str(soak_json), "faults": sched.count, "seed": sched.seed,
            "window_s": r["window_s"], "host": r["host"], "load_avg": r["load_avg"],
            "measured": {k: r["ettr"][k] for k in ("value", "lo", "hi")},
            "predicted": {k: p[k] for k in ("ettr", "ettr_lo", "ettr_hi", "ettr_ci95")},
            "difference_pp": v["difference_pp"], "inside": v["inside"], "met": v["met"],
            "differs": [] if v["met"] else differing(r, p),
            "badput_measured_s": r["badput_s"], "badput_simulated_s": p["badput_s"],
            "inputs": p["inputs"]}


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| faults | seed | measured ETTR [95%] | predicted ETTR (simulated) | "
           "difference pp | inside interval? | goal met? |",
           "|---:|---:|---|---|---:|---|---|"]
    for x in rows:
        m, p = x["measured"], x["predicted"]
        out.append(f"| {x['faults']} | {x['seed']} | {m['value']:.3f} [{m['lo']:.3f}, "
                   f"{m['hi']:.3f}] | {p['ettr']:.3f} (one soak: {p['ettr_lo']:.3f}.."
                   f"{p['ettr_hi']:.3f}) | {x['difference_pp']:+.1f} | "
                   f"{'yes' if x['inside'] else 'no'} | {'yes' if x['met'] else 'no'} |")
    for x in rows:
        if not x["met"] and not x["differs"]:
            x["differs"] = ["no badput group parts by 1 pp or more: the spread of one soak "
                            "(where its faults fell) is the likeliest cause"]
        for line in x["differs"]:
            out.append(f"- {x['faults']} faults, seed {x['seed']}: {line}")
    met = sum(x["met"] for x in rows)
    hosts = ", ".join(sorted({x["host"] for x in rows}))
    out.append(f"\nGoal (inside the measured 95% interval or within {GOAL_PP:g} pp): {met} of "
               f"{len(rows)} met. Measured on {hosts}; predictions simulated.")
    return "\n".join(out)


def run_all(counts: list[int], seed: int, duration_min: float) -> list[dict[str, Any]]:
    fleet = lab.default_fleet_path()
    work = Path(tempfile.mkdtemp(prefix="rackscale-bench-soak-"))
    sd = work / "lab"
    lab.up(Topology.build(load_fleet(fleet)), sd, fleet_file=fleet)
    try:
        rows = []
        for i, n in enumerate(counts):
            rows.append(row(run_soak(sd, work / f"soak-{n}", n, seed + i, duration_min)))
            time.sleep(5)  # the last soak's processes gone before the next one starts
        return rows
    finally:
        lab.down(sd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--soaks", type=int, default=3, help="soaks to run (default 3)")
    ap.add_argument("--faults", help="fault count of each soak, comma-separated; overrides "
                    "--soaks (default: spread from 1 to the most the duration holds)")
    ap.add_argument("--duration-min", type=float, default=6.0, help="minutes per soak")
    ap.add_argument("--quick", action="store_true", help="4-minute soaks")
    ap.add_argument("--seed", type=int, default=0, help="schedule seed of the first soak")
    ap.add_argument("--tabulate", nargs="+", type=Path, metavar="SOAK_JSON",
                    help="tabulate soaks already run instead of running any (no lab)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args(argv)
    if a.tabulate:
        rows = [row(p) for p in a.tabulate]
    else:
        duration = 4.0 if a.quick else a.duration_min
        counts = fault_counts(a.soaks, duration * 60, a.faults)
        why = why_no_lab()
        if why:
            print(f"bench_soak: the soaks need the lab: {why}", file=sys.stderr)
            return 2
        rows = run_all(counts, a.seed, duration)
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps({"measured_vs_simulated": rows, "goal_pp": GOAL_PP},
                                     indent=1), encoding="utf-8")
    return 0 if all(x["met"] for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
