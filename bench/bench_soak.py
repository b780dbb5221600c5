"""The simulator checked against soaks: measured ETTR against the simulator's prediction.

Runs soaks (`rackscale job soak --json`, the CLI as its own process) on a lab it brings up
and tears down: by default one per fault family mix (`--mixes`: rack cooling at 0, 0.5 and 1
of the fail-stop rate, and network faults only; 3 faults each, seeds from 200, which no test
draws), or with `--faults`/`--soaks` a sweep of fault counts without cooling. It sets each
soak's measured ETTR (MEASURED, with its 95% interval) against the
simulator's prediction for it (SIMULATED: the simulator's engine fed the schedule's failure
rates, the soak's job shape and window, and its measured recovery costs; `soak.json`'s
`predicted`). The baseline is the measurement itself: the difference is predicted - measured,
in percentage points. Goal: every prediction inside the measured 95% interval, or within
3 pp; for each one that is not, the badput groups whose simulated and measured figures part
name the assumption that differs.

    PYTHONPATH=src python bench/bench_soak.py [--mixes cooling-0,cooling-0.5,cooling-1,network]
                                              [--faults 1,2,4 | --soaks 3] [--duration-min 6]
                                              [--quick] [--seed 200] [--json OUT]
    PYTHONPATH=src python bench/bench_soak.py --tabulate DIR/soak.json ... [--json OUT]

    PYTHONPATH=src python bench/bench_soak.py --storage [--faults N] [--duration-min 6]
                                              [--kinds K,...] [--seed 200] [--json OUT]
    PYTHONPATH=src python bench/bench_soak.py --storage-tabulate ON/soak.json OFF/soak.json

`--tabulate` builds the table from soaks already run (each `soak.json` with its
`schedule.json` beside it) and needs no lab.

`--storage` runs one schedule twice on one lab: the job's local cache on (its default tiers),
then off (a tiers config with `local_cache: false`, the second soak run with `--schedule` and
the first one's schedule.json), and sets the MEASURED difference in restore time, lost GPU-time
and ETTR beside what the storage what-if (`simulate storage-whatif`'s function) SIMULATES for
cache off vs on, fed both soaks' measured restore times (soak/storage.py says what is fed).
The lab has one host and one region's store, so replication is not compared.
`--storage-tabulate` rebuilds that table from the two soak.json files, without a lab.

Running soaks needs root, tc and torch (the lab); without them it exits 2 with the reason.
A lab run is timing-sensitive: run nothing else heavy beside it.
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
from rackscale.recovery import job_tiers
from rackscale.soak import differing, from_dict, verdict
from rackscale.soak.families import RECOVERY_STEPS, by_family, step_cells
from rackscale.soak.predict import GOAL_PP, predict
from rackscale.soak.schedule import START_ALLOW_S
from rackscale.soak.storage import compare

# The default: one soak per fault family mix, so the simulator is checked on each (a soak
# drawing only network faults, and rack cooling at 0, 0.5 and 1 of the fail-stop rate), on
# seeds no test uses.
MIXES: dict[str, tuple[str, ...]] = {
    "cooling-0": ("--cooling-ratio", "0"),
    "cooling-0.5": ("--cooling-ratio", "0.5"),
    "cooling-1": ("--cooling-ratio", "1"),
    "network": ("--kinds", "bad_cable,nic_dead"),
}
MIX_FAULTS, MIX_SEED = 3, 200
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


def run_soak(labdir: Path, out: Path, faults: int, seed: int, duration_min: float,
             extra: tuple[str, ...] = ()) -> Path:
    """One soak through the CLI; its soak.json. `extra`: more `job soak` options."""
    db = out.parent / "bench-soak.db"
    cmd = [sys.executable, "-m", "rackscale", "job", "soak", "--lab", str(labdir),
           "--duration-min", str(duration_min), "--fault-count", str(faults), "--seed",
           str(seed), "--job-gpus", str(JOB_GPUS), "--spares", str(SPARES), "--out", str(out),
           "--db", f"sqlite:///{db}", "--json", *extra]
    print(f"soak: {faults} faults, seed {seed}, {duration_min:g} min {' '.join(extra)} ...",
          flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True,
                          timeout=duration_min * 60 + 300, check=False)
    if done.returncode != 0:
        raise SoakStopped(faults, seed, done.returncode, _error_of(done.stdout, done.stderr))
    return out / "soak.json"


class SoakStopped(Exception):
    """A soak that ended without figures (e.g. its job ran out of spares): a row of its own,
    with the reason, and the next soak still runs."""

    def __init__(self, faults: int, seed: int, code: int, why: str) -> None:
        super().__init__(f"the soak of {faults} faults, seed {seed}, stopped (exit {code}): {why}")
        self.faults, self.seed, self.why = faults, seed, why


def _error_of(stdout: str, stderr: str) -> str:
    """The soak's own error message (its --json error), else the end of its output."""
    try:
        return str(json.loads(stdout)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return (stdout[-1000:] + stderr[-1000:]).strip()


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
            "inputs": p["inputs"], "by_family": by_family(r)}


def mix_of(soak_json: Path) -> str:
    """The mix of a soak this bench ran, from its directory (`soak-1-cooling-0.5-3`: the
    soak's number, its mix, its fault count); '-' for a directory named otherwise."""
    parts = soak_json.parent.name.split("-")
    return "-".join(parts[2:-1]) if len(parts) > 3 and parts[0] == "soak" else "-"


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| mix | faults | seed | measured ETTR [95%] | predicted ETTR (simulated) | "
           "difference pp | inside interval? | goal met? |",
           "|---|---:|---:|---|---|---:|---|---|"]
    for x in rows:
        if "stopped" in x:
            out.append(f"| {x.get('mix', '-')} | {x['faults']} | {x['seed']} | - | - | - | - | "
                       "no: the job stopped |")
            continue
        m, p = x["measured"], x["predicted"]
        out.append(f"| {x.get('mix', '-')} | {x['faults']} | {x['seed']} | {m['value']:.3f} "
                   f"[{m['lo']:.3f}, "
                   f"{m['hi']:.3f}] | {p['ettr']:.3f} (one soak: {p['ettr_lo']:.3f}.."
                   f"{p['ettr_hi']:.3f}) | {x['difference_pp']:+.1f} | "
                   f"{'yes' if x['inside'] else 'no'} | {'yes' if x['met'] else 'no'} |")
    ran = [x for x in rows if "stopped" not in x]
    for x in rows:
        if "stopped" in x:
            out.append(f"- {x.get('mix', '')} seed {x['seed']}: stopped: {x['stopped']}")
    for x in ran:
        if not x["met"] and not x["differs"]:
            x["differs"] = ["no badput group parts by 1 pp or more: the spread of one soak "
                            "(where its faults fell) is the likeliest cause"]
        for line in x["differs"]:
            out.append(f"- {x.get('mix', '')} {x['faults']} faults, seed {x['seed']}: {line}")
    for x in ran:
        assumed = [f"{k} = {v.get('value')} ({v.get('basis')})" for k, v in x["inputs"].items()
                   if isinstance(v, dict) and str(v.get("basis", "")).startswith("assumed")]
        out.append(f"- {x.get('mix', '')} seed {x['seed']}: inputs assumed, not measured: "
                   + ("; ".join(assumed) or "none"))
    met = sum(x["met"] for x in ran)
    hosts = ", ".join(sorted({x["host"] for x in ran})) or "the lab"
    out.append(f"\nGoal (inside the measured 95% interval and within {GOAL_PP:g} pp): {met} "
               f"of {len(rows)} met. Measured on {hosts}; predictions simulated.")
    out.append(family_table(ran))
    return "\n".join(out)


def family_table(rows: list[dict[str, Any]]) -> str:
    """Each soak's recovery steps by fault family, mean s over the family's faults (measured;
    - where none of them measured the step), and the simulator inputs the family feeds."""
    steps = [k.removesuffix("_s") for k in RECOVERY_STEPS]
    out = ["\nRecovery by fault family, mean s (measured):\n",
           "| mix | seed | family | faults | " + " | ".join(steps) + " | feeds (simulator) |",
           "|---|---:|---|---|" + "---:|" * len(steps) + "---|"]
    for x in rows:
        for fam, f in (x.get("by_family") or {}).items():
            out.append(f"| {x.get('mix', '-')} | {x['seed']} | {fam} | "
                       f"{', '.join(f'#{i}' for i in f['faults'])} | "
                       + " | ".join(step_cells(f))
                       + f" | {f['sim_class']}: {f['feeds']} |")
    return "\n".join(out)


def run_all(plan: list[tuple[str, int, tuple[str, ...]]], seed: int,
            duration_min: float) -> list[dict[str, Any]]:
    """Each (mix, fault count, job soak options) of `plan` as one soak, on one lab."""
    fleet = lab.default_fleet_path()
    work = Path(tempfile.mkdtemp(prefix="rackscale-bench-soak-"))
    sd = work / "lab"
    lab.up(Topology.build(load_fleet(fleet)), sd, fleet_file=fleet)
    try:
        rows = []
        for i, (mix, n, extra) in enumerate(plan):
            out = work / f"soak-{i}-{mix}-{n}"
            try:
                rows.append(row(run_soak(sd, out, n, seed + i, duration_min, extra))
                            | {"mix": mix})
            except SoakStopped as err:
                print(f"bench_soak: {err}", file=sys.stderr, flush=True)
                rows.append({"mix": mix, "faults": n, "seed": seed + i, "stopped": err.why,
                             "soak": str(out / "soak.json")})
            print(table(rows[-1:]), flush=True)
            time.sleep(5)  # the last soak's processes gone before the next one starts
        return rows
    finally:
        lab.down(sd)


def plan_of(a: argparse.Namespace, duration_s: float) -> list[tuple[str, int, tuple[str, ...]]]:
    """--faults sweeps fault counts on one mix (no cooling); else one soak per --mixes."""
    if a.faults or a.soaks_given:
        return [("cooling-0", n, ()) for n in fault_counts(a.soaks, duration_s, a.faults)]
    mixes = [m.strip() for m in a.mixes.split(",") if m.strip()]
    bad = [m for m in mixes if m not in MIXES]
    if bad or not mixes:
        raise SystemExit(f"bench_soak: unknown mix {bad or mixes}; valid: {', '.join(MIXES)}")
    n = min(MIX_FAULTS, most_faults(duration_s))
    return [(m, n, MIXES[m]) for m in mixes]


def cache_off_config(path: Path, soak_out: Path) -> Path:
    """The job's default tiers for a soak in `soak_out`, the local cache off: the two soaks
    differ in nothing else."""
    cfg = job_tiers(soak_out / "job").model_copy(update={"local_cache": False})
    path.write_text(cfg.model_dump_json(indent=1), encoding="utf-8")
    return path


def run_storage(faults: int, seed: int, duration_min: float,
                kinds: str | None) -> tuple[Path, Path]:
    """One schedule, the cache on then off, on one lab; the two soak.json files."""
    fleet = lab.default_fleet_path()
    work = Path(tempfile.mkdtemp(prefix="rackscale-bench-soak-storage-"))
    sd = work / "lab"
    lab.up(Topology.build(load_fleet(fleet)), sd, fleet_file=fleet)
    try:
        on = run_soak(sd, work / "cache-on", faults, seed, duration_min,
                      ("--kinds", kinds) if kinds else ())
        time.sleep(5)  # the first soak's processes gone before the next one starts
        cfg = cache_off_config(work / "cache-off-tiers.json", work / "cache-off")
        off = run_soak(sd, work / "cache-off", faults, seed, duration_min,
                       ("--schedule", str(on.parent / "schedule.json"), "--config", str(cfg)))
        return on, off
    finally:
        lab.down(sd)


def storage_result(on: Path, off: Path) -> dict[str, Any]:
    """The comparison (soak/storage.py) of two soak.json files of one schedule."""
    r_on, r_off = (json.loads(p.read_text(encoding="utf-8")) for p in (on, off))
    sched = from_dict(json.loads((on.parent / "schedule.json").read_text(encoding="utf-8")))
    return compare(r_on, r_off, sched, names=(str(on), str(off))) | {
        "soaks": {"on": str(on), "off": str(off)}}


def _s(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def storage_table(c: dict[str, Any]) -> str:
    m, s = c["measured"], c["simulated"]
    out = ["| local cache | restore s per restart | lost work GPU-s | lost GPU-s (all) | "
           "ETTR [95%] |", "|---|---:|---:|---:|---|"]
    for key, label in (("on", "on"), ("off", "off")):
        x = m[key]
        e = x["ettr"]
        out.append(f"| {label} (measured) | {_s(x['restore_s_per_restart'])} | "
                   f"{x['lost_work_gpu_s']:.1f} | {x['lost_gpu_s']:.1f} | {e['value']:.3f} "
                   f"[{e['lo']:.3f}, {e['hi']:.3f}] |")
    d = m["off_minus_on"]
    out.append(f"| off - on (measured) | {_s(d['restore_s_per_restart'], '+.2f')} | "
               f"{d['lost_work_gpu_s']:+.1f} | {d['lost_gpu_s']:+.1f} | "
               f"{d['ettr_pp']:+.1f} pp |")
    for key in ("on", "off"):
        x = s[key]
        lost, e = x["lost_gpu_s"], x["ettr"]
        out.append(f"| {key} (simulated) | {_s(x['restore_s_per_restart'])} | - | "
                   f"{lost['mean']:.1f} ± {lost['ci95']:.1f} | {e['mean']:.3f} ± "
                   f"{e['ci95']:.3f} |")
    d = s["off_minus_on"]
    out.append(f"| off - on (simulated) | {_s(d['restore_s_per_restart'], '+.2f')} | - | "
               f"{d['lost_gpu_s']['mean']:+.1f} ± {d['lost_gpu_s']['ci95']:.1f} (paired) | "
               f"{d['ettr_pp']:+.2f} pp |")
    st = s["storage"]
    out += [f"\nMeasured on {', '.join(c['hosts']) or 'the lab'}: each soak's restore (the "
            "slowest rank's load, mean per restart), lost work x GPUs, (1 - ETTR) x window x "
            "GPUs, ETTR with its 95% interval.",
            f"Simulated by the storage what-if ({s['trials']} trials, the same failures for "
            "both setups): its setups 'cache only' "
            f"and 'neither' for the soak's job and failure rates, fed restore from the cache "
            f"{st['restore_local_s']:.2f} s (the cache-on soak's, measured) and from the "
            f"region {st['restore_region_s']:.2f} s (the cache-off soak's, measured). In the "
            "model only a crash that leaves the node restores from its cache; on the lab a "
            "replaced slot reads from the region even with the cache on, so the cache-on "
            "figure fed as 'from the cache' is an upper bound."]
    return "\n".join(out)


def main_storage(a: argparse.Namespace) -> int:
    if a.storage_tabulate:
        on, off = a.storage_tabulate
    else:
        duration = 4.0 if a.quick else a.duration_min
        faults = fault_counts(1, duration * 60, a.faults)[0] if a.faults else \
            most_faults(duration * 60)
        why = why_no_lab()
        if why:
            print(f"bench_soak: the soaks need the lab: {why}", file=sys.stderr)
            return 2
        on, off = run_storage(faults, a.seed, duration, a.kinds)
    c = storage_result(on, off)
    print(storage_table(c))
    if a.json:
        a.json.write_text(json.dumps(c, indent=1), encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mixes", default=",".join(MIXES), help="fault family mixes, one soak "
                    f"each, {MIX_FAULTS} faults (default: {','.join(MIXES)})")
    ap.add_argument("--soaks", type=int, default=None, help="instead of --mixes: this many "
                    "soaks without cooling faults, fault counts spread from 1 up")
    ap.add_argument("--faults", help="instead of --mixes: fault count of each soak, "
                    "comma-separated (no cooling faults)")
    ap.add_argument("--duration-min", type=float, default=6.0, help="minutes per soak")
    ap.add_argument("--quick", action="store_true", help="4-minute soaks")
    ap.add_argument("--seed", type=int, default=MIX_SEED, help="schedule seed of the first "
                    f"soak (default {MIX_SEED}: no test draws it)")
    ap.add_argument("--tabulate", nargs="+", type=Path, metavar="SOAK_JSON",
                    help="tabulate soaks already run instead of running any (no lab)")
    ap.add_argument("--storage", action="store_true", help="one schedule with the job's "
                    "local cache on, then off, beside the storage what-if (the first of "
                    "--faults, default the most the duration holds)")
    ap.add_argument("--kinds", help="--storage: the fault kinds drawn (job soak --kinds)")
    ap.add_argument("--storage-tabulate", nargs=2, type=Path, metavar=("ON_JSON", "OFF_JSON"),
                    help="the --storage table from two soaks already run, cache on then off "
                    "(no lab)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    a = ap.parse_args(argv)
    a.soaks_given = a.soaks is not None
    a.soaks = a.soaks or 3
    if a.storage or a.storage_tabulate:
        return main_storage(a)
    if a.tabulate:
        rows = [row(p) | {"mix": mix_of(p)} for p in a.tabulate]
    else:
        duration = 4.0 if a.quick else a.duration_min
        plan = plan_of(a, duration * 60)
        why = why_no_lab()
        if why:
            print(f"bench_soak: the soaks need the lab: {why}", file=sys.stderr)
            return 2
        rows = run_all(plan, a.seed, duration)
    print(table(rows))
    if a.json:
        a.json.write_text(json.dumps({"measured_vs_simulated": rows, "goal_pp": GOAL_PP},
                                     indent=1), encoding="utf-8")
    return 0 if all(x["met"] for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
