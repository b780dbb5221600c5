"""The soak's figures, measured from what the run left on disk: the ranks' heartbeats, the
supervisor's incidents and the soak's own log of what it injected when (`progress.jsonl`). A
soak whose process died still has all three, so its figures can be computed afterwards.

- Useful work: every step the job completed and kept (a step done past the checkpoint the
  next attempt resumed from is lost work, redone later), each worth the clean step time (the
  median step time outside every fault's window, over every attempt, each attempt's first
  steps and the saves left out).
- ETTR: useful work / the soak's wall time (launch to stop). Its 95% interval is a block
  bootstrap over the run's time: the run cut into `BLOCK_S` blocks, each block's useful time
  resampled with replacement.
- Badput by cause, per incident: detection (fault to decision, for a crash or hang; for a
  slow fault the same window is running degraded), stop, localization, restart, restore
  (the slowest rank's load), lost work; a fault no one detected runs degraded until it is
  lifted. `initial_start` is the first launch to the first step; `checkpoint` the time the
  saves held the training loop (each saving step's slowest rank, from its heartbeat);
  `other` is what is left of the wall time (the host's noise, steps slower than the clean
  one), so the causes add up to the wall time.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rackscale.store import RecoveryIncidentV1, carried_payload

BLOCK_S = 10.0
RESAMPLES = 2000
FIRST_STEPS_LEFT_OUT = 5
BADPUT_CAUSES = ("initial_start", "detection", "running_degraded", "stop", "localization",
                 "restart", "restore", "lost_work", "checkpoint", "other")
# the causes an incident has (the rest are the run's as a whole)
INCIDENT_CAUSES = BADPUT_CAUSES[1:-2]
CRASH = ("fail_stop", "hang")


@dataclass(frozen=True, slots=True)
class Step:
    attempt: int
    step: int
    t: float  # when the last rank completed it
    saved_s: float = 0.0  # the save it ended with held the loop this long (slowest rank)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The whole lines of a JSON-lines file (a line cut short by a crash is left out)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def job_steps(job_dir: Path, gpus: int) -> list[Step]:
    """Every step some attempt completed on all its ranks, in time order."""
    per: dict[tuple[int, int], list[float]] = {}
    saves: dict[tuple[int, int], list[float]] = {}
    for f in sorted((job_dir / "beats").glob("a*-r*.jsonl")):
        attempt = int(f.name[1:4])
        for b in read_jsonl(f):
            if b.get("phase") == "step":
                key = (attempt, int(b["step"]))
                per.setdefault(key, []).append(float(b["t"]))
                if "saved_s" in b:
                    saves.setdefault(key, []).append(float(b["saved_s"]))
    # a save counts once every rank reported it: the loop waits for the slowest one
    steps = [Step(a, s, max(ts), max(saves[a, s]) if len(saves.get((a, s), ())) >= gpus
                  else 0.0) for (a, s), ts in per.items() if len(ts) >= gpus]
    return sorted(steps, key=lambda x: x.t)


def save_time(steps: Iterable[Step], t0: float = float("-inf"),
              t1: float = float("inf")) -> float:
    """Seconds the checkpoint saves of the steps completed in (t0, t1] held the training loop
    (per saving step every rank completed, its slowest rank's `saved_s`)."""
    return sum(s.saved_s for s in steps if t0 < s.t <= t1)


def _unaccounted(steps: list[Step], t0: float, t1: float, unit: float) -> float:
    """The time of (t0, t1] that neither the steps done in it (each worth the clean step) nor
    their saves (the `checkpoint` cause) account for: a window's detection or degraded cost.
    Without the saves taken out, a save inside the window counted twice."""
    return max(0.0, (t1 - t0) - done_between(steps, t0, t1) * unit - save_time(steps, t0, t1))


def kept(steps: list[Step], resumed_from: dict[int, int]) -> list[Step]:
    """Steps not redone: a step of attempt a is lost when a later attempt resumed from a
    checkpoint before it (`resumed_from`: attempt -> the checkpoint step it started from)."""
    attempts = sorted({s.attempt for s in steps} | set(resumed_from))
    floor: dict[int, float] = {}
    low = float("inf")
    for a in reversed(attempts):
        floor[a] = low
        if a in resumed_from:
            low = min(low, resumed_from[a])
    return [s for s in steps if s.step <= floor[s.attempt]]


def first_steps(steps: Iterable[Step]) -> dict[int, int]:
    """attempt -> its first completed step."""
    first: dict[int, int] = {}
    for s in steps:
        first[s.attempt] = min(first.get(s.attempt, s.step), s.step)
    return first


def resumed_from(steps: list[Step]) -> dict[int, int]:
    """attempt -> the step it resumed from (its first completed step, less one)."""
    return {a: st - 1 for a, st in first_steps(steps).items() if a > 1}


def clean_step_s(steps: list[Step], faulty: Iterable[tuple[float, float]]) -> float | None:
    """Median time of a clean step: one that followed the step before it in the same attempt,
    past that attempt's first `FIRST_STEPS_LEFT_OUT` steps, outside every window in `faulty`
    (a fault from its injection to its lift), less the save it ended with (the saves are
    their own cause). Every attempt counts: a later attempt runs on other slots, and a unit
    taken from the first alone put `other` below zero when the spares ran faster."""
    windows, first = list(faulty), first_steps(steps)
    own = sorted((s for s in steps if s.step >= first[s.attempt] + FIRST_STEPS_LEFT_OUT),
                 key=lambda x: (x.attempt, x.step))
    gaps = [b.t - a.t - b.saved_s for a, b in itertools.pairwise(own)
            if b.attempt == a.attempt and b.step == a.step + 1
            and not any(lo < b.t and a.t < hi for lo, hi in windows)]
    return statistics.median(gaps) if gaps else None


def done_between(steps: Iterable[Step], t0: float, t1: float) -> int:
    return sum(1 for s in steps if t0 < s.t <= t1)


def interval(useful: list[float], t0: float, t1: float, unit: float,
             seed: int = 0) -> tuple[float, float]:
    """95% block bootstrap interval of the useful fraction over [t0, t1]."""
    n = max(1, int((t1 - t0) // BLOCK_S))
    size = (t1 - t0) / n
    blocks = [0.0] * n
    for t in useful:
        blocks[min(n - 1, max(0, int((t - t0) // size)))] += unit
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(blocks, k=n)) / (n * size) for _ in range(RESAMPLES))
    return means[int(0.025 * RESAMPLES)], means[int(0.975 * RESAMPLES) - 1]


def _incident_badput(inc: dict[str, Any], start: float, steps: list[Step],
                     unit: float) -> tuple[dict[str, float], float]:
    """One incident's badput by cause, and when the job ran again (its first step)."""
    d = float(inc["detected_at"])
    pre = _unaccounted(steps, start, d, unit)
    out = dict.fromkeys(INCIDENT_CAUSES, 0.0)
    out["detection" if inc["symptom"] in CRASH else "running_degraded"] = pre
    stop, loc, restore = (float(inc.get(k) or 0.0) for k in ("stop_s", "localize_s",
                                                              "restore_s"))
    down = inc.get("downtime_s")
    again = d + float(down) if down is not None else None
    if down is not None:
        out["restart"] = max(0.0, float(down) - stop - loc - restore - unit)
    out |= {"stop": stop, "localization": loc, "restore": restore,
            "lost_work": int(inc.get("work_lost_steps") or 0) * unit}
    return out, again if again is not None else d


def _named(fault: dict[str, Any], inc: dict[str, Any] | None) -> str:
    if inc is None:
        return "not detected"
    if inc.get("component") == fault["component"]:
        return "exact"
    if fault.get("rack") and inc.get("component") == fault["rack"]:
        return "its rack"  # a cooling fault's CDU, named by the rack it cools
    if inc.get("slot") == fault.get("slot") or inc.get("component") == fault.get("slot"):
        return "its GPU slot" if fault["component"] != fault.get("slot") else "exact"
    return "other part"


def per_fault(faults: list[dict[str, Any]], incidents: list[dict[str, Any]],
              steps: list[Step], unit: float, t_end: float) -> tuple[
                  list[dict[str, Any]], list[dict[str, Any]]]:
    """Each injected fault with the incidents it caused (those detected between its injection
    and the next one's), and the incidents no fault explains."""
    rows, used = [], set()
    for i, f in enumerate(faults):
        t0 = float(f["injected_at"])
        t1 = float(faults[i + 1]["injected_at"]) if i + 1 < len(faults) else t_end
        mine = [j for j, inc in enumerate(incidents)
                if inc.get("detected_at") is not None and t0 <= inc["detected_at"] < t1]
        used.update(mine)
        bad = dict.fromkeys(INCIDENT_CAUSES, 0.0)
        start, incs = t0, [incidents[j] for j in mine]
        for inc in incs:
            b, start = _incident_badput(inc, start, steps, unit)
            bad = {k: bad[k] + b[k] for k in bad}
        excluded = any(inc.get("outcome") == "resumed" for inc in incs)
        if not excluded:  # the part stayed in the job: it ran degraded until lifted
            end = min(float(f.get("lifted_at") or t_end), t_end)
            if f["action"] not in ("kill", "hang") and end > start:
                bad["running_degraded"] += _unaccounted(steps, start, end, unit)
        first = incs[0] if incs else None
        rows.append(f | {
            "detected": first is not None,
            "time_to_detect_s": round(first["detected_at"] - t0, 3) if first else None,
            "named": {"component": first.get("component"), "kind": first.get("fault_kind"),
                      "symptom": first.get("symptom")} if first else None,
            "named_vs_injected": _named(f, first),
            "recovered": bool(incs) and incs[-1].get("first_step_s") is not None,
            "incidents": len(incs), "outcomes": [inc.get("outcome") for inc in incs],
            "badput_s": {k: round(v, 3) for k, v in bad.items()},
        })
    rest = [inc for j, inc in enumerate(incidents) if j not in used]
    return rows, rest


def figures(*, job_dir: Path, gpus: int, spares: int, t_launch: float, t_end: float,
            faults: list[dict[str, Any]], seed: int = 0) -> dict[str, Any]:
    """The soak's measured figures (module doc) from its files."""
    steps = [s for s in job_steps(job_dir, gpus) if s.t <= t_end]
    rows = read_jsonl(job_dir / "incidents.jsonl")
    incidents = [carried_payload(r, RecoveryIncidentV1).dump() for r in rows
                 if r.get("kind") == RecoveryIncidentV1.KIND]
    faulty = [(float(f["injected_at"]), min(float(f.get("lifted_at") or t_end), t_end))
              for f in faults]
    unit = clean_step_s(steps, faulty)
    if unit is None or not steps:
        raise ValueError("the job completed too few steps outside its faults to measure a "
                         "clean step time")
    good = kept(steps, resumed_from(steps))
    wall = t_end - t_launch
    useful = len(good) * unit
    lo, hi = interval([s.t for s in good], t_launch, t_end, unit, seed)
    fault_rows, rest = per_fault(faults, incidents, steps, unit, t_end)
    bad = dict.fromkeys(BADPUT_CAUSES, 0.0)
    bad["initial_start"] = max(0.0, steps[0].t - t_launch - unit)
    for r in fault_rows:
        for k, v in r["badput_s"].items():
            bad[k] += v
    for inc in rest:  # incidents no injected fault explains (a false flag) cost too
        b, _ = _incident_badput(inc, float(inc["detected_at"]), steps, unit)
        for k, v in b.items():
            bad[k] += v
    bad["checkpoint"] = save_time(steps)  # the steps up to t_end
    bad["other"] = wall - useful - sum(v for k, v in bad.items() if k != "other")
    ettr = useful / wall
    share = gpus / (gpus + spares)
    return {
        "window_s": round(wall, 3), "clean_step_s": round(unit, 6),
        "steps_completed": len(steps), "steps_kept": len(good),
        "steps_lost": len(steps) - len(good),
        "ettr": {"value": round(ettr, 4), "lo": round(lo, 4), "hi": round(hi, 4),
                 "method": f"95% block bootstrap over the run's time ({BLOCK_S:.0f} s blocks, "
                           f"{RESAMPLES} resamples)"},
        "goodput": {"kept_steps_per_s": round(len(good) / wall, 4),
                    "clean_steps_per_s": round(1 / unit, 4),
                    "of_slots": {"value": round(ettr * share, 4), "lo": round(lo * share, 4),
                                 "hi": round(hi * share, 4)},
                    "means": "useful GPU-time over the GPU-time of every slot held "
                             "(the job's GPUs and its spares)"},
        "badput_s": {k: round(v, 3) for k, v in bad.items()},
        "faults": fault_rows,
        "unexplained_incidents": rest,
        "incidents": len(incidents),
    }
