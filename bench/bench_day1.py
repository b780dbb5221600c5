"""Benchmark: an operator's day 1 at 128k GPUs, command by command, through the real CLI.

    python bench/bench_day1.py            # 1,778 vr-nvl72 racks (128,016 GPUs) vs 100 racks
    python bench/bench_day1.py --quick    # 100 vs 25 racks (a smoke run)

For each fleet size, in a fresh SQLite store, the five commands of day 1 run as separate
processes, each timed (wall, process start included):

    fleet load --fleet F                                   the fleet's shape into the store
    lifecycle run --goal production --until-idle           onboarding: every rack to burn_in
    certify run                                            the ladder on the digital twin
    lifecycle run --until-idle                             certified racks to production
    report build                                           the usable-capacity report

then `lifecycle run --once` on the settled fleet: a pass with nothing to do. Targets: the whole
day 1 at the default size in <= 180 s; the onboarding cost per rack at the large size within
1.5x of the small size's (the baseline, measured in the same run), counted both as the
controller's own pass time (from `--json`) and as the command's wall time; the quiet pass
<= 1 s (the pass as the CLI reports it; the command's wall, interpreter start included, is
printed beside it). Power, CDUs and certification are simulated (the twin): figures say so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAY1_TARGET_S = 180.0
RATIO_TARGET = 1.5
QUIET_TARGET_S = 1.0
RACKSCALE = [sys.executable, "-m", "rackscale"]


@dataclass
class Day1:
    racks: int
    steps: dict[str, float] = field(default_factory=dict)  # command -> wall seconds
    onboard_pass_s: float = 0.0  # controller pass time of the onboarding command, summed
    quiet_pass_s: float = 0.0
    quiet_wall_s: float = 0.0

    @property
    def total(self) -> float:
        return sum(self.steps.values())


def _fleet_file(d: Path, racks: int) -> Path:
    per, extra = divmod(racks, 2)
    regions = "".join(f"  - name: region-{i}\n    racks: [{{template: vr-nvl72, count: "
                      f"{per + (1 if i < extra else 0)}}}]\n" for i in range(2))
    path = d / "fleet.yaml"
    path.write_text(f"name: day1-{racks}\nregions:\n{regions}")
    return path


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([*RACKSCALE, *args], env=env, capture_output=True, text=True,
                         timeout=1800, check=False)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"rackscale {' '.join(args)} exited {res.returncode}:\n"
                         f"{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return wall, res.stdout


def _pass_seconds(stdout: str) -> float:
    """The controller's own time: the sum of the `seconds` of each pass `--json` printed."""
    total, i, dec = 0.0, 0, json.JSONDecoder()
    while (i := stdout.find("{", i)) >= 0:
        doc, i = dec.raw_decode(stdout, i)
        total += float(doc["seconds"])
    return total


def day1(racks: int) -> Day1:
    out = Day1(racks)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        env = {**os.environ, "RACKSCALE_DB": f"sqlite:///{d / 'day1.db'}",
               "COLUMNS": "200"}
        plant = ["--plant", str(d / "plant.json")]
        fleet = _fleet_file(d, racks)
        steps: list[tuple[str, list[str]]] = [
            ("fleet load", ["fleet", "load", "--fleet", str(fleet)]),
            ("lifecycle run --goal production --until-idle (to burn_in)",
             ["lifecycle", "run", "--goal", "production", "--until-idle", "--period-s", "0",
              "--json", *plant]),
            ("certify run (twin)", ["certify", "run", "--out", str(d / "certify")]),
            ("lifecycle run --until-idle (to production)",
             ["lifecycle", "run", "--until-idle", "--period-s", "0", *plant]),
            ("report build", ["report", "build", "--out", str(d / "report")]),
        ]
        for name, args in steps:
            wall, stdout = _run(args, env)
            out.steps[name] = wall
            if "--goal" in args:
                out.onboard_pass_s = _pass_seconds(stdout)
            print(f"  {racks:5d} racks  {name:58s} {wall:7.2f} s", flush=True)
        _, status = _run(["lifecycle", "status", "--json"], env)
        serving = json.loads(status)["rack"].get("production", 0)
        if serving != racks:  # the twin has no faults here: every rack must get there
            raise SystemExit(f"{racks} racks: only {serving} reached production: {status}")
        out.quiet_wall_s, stdout = _run(["lifecycle", "run", "--once", "--json", *plant], env)
        out.quiet_pass_s = _pass_seconds(stdout)
        print(f"  {racks:5d} racks  {'quiet pass (lifecycle run --once)':58s} "
              f"{out.quiet_pass_s:7.2f} s pass, {out.quiet_wall_s:.2f} s wall", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 vs 25 racks (smoke)")
    ap.add_argument("--racks", type=int, default=None, help="the large fleet (default 1778)")
    ap.add_argument("--baseline-racks", type=int, default=None,
                    help="the small fleet, the per-rack baseline (default 100)")
    args = ap.parse_args()
    big = args.racks or (100 if args.quick else 1778)
    small = args.baseline_racks or (25 if args.quick else 100)
    print(f"day 1 through the CLI, SQLite, simulated power/CDUs, twin certification "
          f"(measured wall times on this machine): {small} racks (baseline), then {big}")
    base, run = day1(small), day1(big)

    onboard = "lifecycle run --goal production --until-idle (to burn_in)"
    pass_ratio = (run.onboard_pass_s / big) / (base.onboard_pass_s / small)
    wall_ratio = (run.steps[onboard] / big) / (base.steps[onboard] / small)
    print(f"\nday 1 at {big} racks ({big * 72:,} GPUs): {run.total:.1f} s "
          f"(target <= {DAY1_TARGET_S:.0f} s)")
    print(f"onboarding per rack, {big} vs {small} racks: controller passes "
          f"{1000 * run.onboard_pass_s / big:.2f} vs {1000 * base.onboard_pass_s / small:.2f} "
          f"ms/rack = {pass_ratio:.2f}x; command wall {1000 * run.steps[onboard] / big:.2f} vs "
          f"{1000 * base.steps[onboard] / small:.2f} ms/rack = {wall_ratio:.2f}x "
          f"(target <= {RATIO_TARGET}x)")
    print(f"quiet pass at {big} racks: {run.quiet_pass_s:.2f} s (target <= {QUIET_TARGET_S} s;"
          f" the command's wall with interpreter start: {run.quiet_wall_s:.2f} s)")
    missed = [name for name, ok in (
        ("day 1", run.total <= DAY1_TARGET_S), ("per-rack ratio", pass_ratio <= RATIO_TARGET),
        ("quiet pass", run.quiet_pass_s <= QUIET_TARGET_S)) if not ok]
    if missed:
        print(f"target missed: {', '.join(missed)}")
        raise SystemExit(1)
    print("all targets met")


if __name__ == "__main__":
    main()
