"""Straggler detection side by side: rackscale's detector and NVIDIA's nvidia-resiliency-ext
(NVRx) on the same measured section times (part of bench_recovery.py, `--straggler`).

Two real 2-rank jobs of the reference trainer are recorded (gloo, CPU, straggler flagging
off so that they run to the end): one with rank 1 doing 1.5x its compute work from step 11,
one clean. Each rank's per-step compute time (its heartbeat's `compute_s`) is then fed to
both detectors, step by step:

- rackscale: `StragglerDetector` with its defaults (threshold 0.75, 5 consecutive steps,
  the first 5 steps unscored);
- NVRx: its scoring, `straggler.reporting.ReportGenerator`, in two gloo processes (its
  section scores: the lowest median of all ranks over a report window / the rank's median,
  flagged under 0.75 by `Report.identify_stragglers`), with a report every `window` steps.
  NVRx's `Detector` itself does not start on a CPU-only host (its CUPTI extension needs
  libcupti.so.12, and `generate_report` calls `torch.cuda.synchronize()`), so its scoring is
  called directly with the sections it would have timed.

Steps to detection count from the first slow step; false flags are flags in the clean run.
Every time is measured on this host; none is simulated.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

SLOW_SLOT = "local/r01/c01/gpu1"
# The slow rank degrades at this step: rackscale's rule needs a rank slower than its own
# best as well as than the others, so a rank slow from its first step is never flagged.
SLOW_FROM = 11


def record(root: Path, env: dict[str, str], steps: int, slow: bool) -> list[list[float]]:
    """Per-step compute times [step][rank] of a real 2-rank run."""
    job = root / f"straggler-{'slow' if slow else 'clean'}"
    extra = ["--slow-slot", SLOW_SLOT, "--slow-factor", "1.5", "--slow-from", str(SLOW_FROM)] \
        if slow else []
    p = subprocess.run([sys.executable, "-m", "rackscale", "job", "run", "--job-gpus", "2",
                        "--ckpt-every", str(steps), "--job-dir", str(job), "--straggler-steps",
                        "1000000", "--json", "--", sys.executable, "-m",
                        "rackscale.recovery.trainer", "--steps", str(steps), "--job-dir",
                        str(job), *extra], env=env, capture_output=True, text=True,
                       timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"recording run failed: {p.stdout[-800:]} {p.stderr[-800:]}")
    per_rank = []
    for r in (0, 1):
        lines = (job / "beats" / f"a001-r{r:04d}.jsonl").read_text().splitlines()
        per_rank.append({b["step"]: b["compute_s"] for b in map(json.loads, lines)
                         if b["phase"] == "sync"})
    common = sorted(set(per_rank[0]) & set(per_rank[1]))
    return [[per_rank[0][s], per_rank[1][s]] for s in common]


def rackscale_flags(times: list[list[float]]) -> list[tuple[int, int]]:
    """(step, rank) of every flag of rackscale's detector (it restarts after each flag, as the
    supervisor's next attempt does)."""
    from rackscale.recovery import DetectConfig, RankBeats, StragglerDetector

    flags, det = [], StragglerDetector(2, DetectConfig())
    ranks = [RankBeats(rank=r) for r in (0, 1)]
    base = 0
    for step, row in enumerate(times, 1):
        for r, t in enumerate(row):
            ranks[r].add({"phase": "sync", "step": step - base, "t": float(step),
                          "compute_s": t})
        got = det.feed(ranks)
        if got is not None:
            flags.append((step, got.rank))
            det, base = StragglerDetector(2, DetectConfig()), step
            ranks = [RankBeats(rank=r) for r in (0, 1)]
    return flags


def _nvrx_rank(rank: int, port: int, times_file: str, window: int, out_file: str) -> None:
    """One NVRx rank: its section times, a report every `window` steps (ms, as NVRx's)."""
    import torch.distributed as dist
    from nvidia_resiliency_ext.straggler.reporting import ReportGenerator
    from nvidia_resiliency_ext.straggler.statistics import Statistic

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    times = json.loads(Path(times_file).read_text())
    gen = ReportGenerator(scores_to_compute=["relative_perf_scores"], gather_on_rank0=True,
                          node_name=f"rank{rank}")
    flags = []
    for end in range(window, len(times) + 1, window):
        mine = sorted(1000 * times[s][rank] for s in range(end - window, end))
        summary = {Statistic.MIN: mine[0], Statistic.MAX: mine[-1],
                   Statistic.MED: mine[len(mine) // 2], Statistic.AVG: sum(mine) / len(mine),
                   Statistic.STD: 0.0, Statistic.NUM: len(mine)}
        report = gen.generate_report({"step": summary}, {})
        if rank == 0 and report is not None:
            found = report.identify_stragglers(section_rel_threshold=0.75)
            for sid in found["straggler_sections_relative"].get("step", set()):
                flags.append((end, sid.rank))
    if rank == 0:
        Path(out_file).write_text(json.dumps(flags))
    dist.destroy_process_group()


def nvrx_flags(times: list[list[float]], window: int, root: Path,
               env: dict[str, str]) -> list[tuple[int, int]]:
    tf, of = root / f"times-{window}.json", root / f"nvrx-{window}.json"
    tf.write_text(json.dumps(times))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    here = str(Path(__file__).parent)
    code = (f"import sys; sys.path.insert(0, {here!r}); from straggler_nvrx import _nvrx_rank; "
            f"_nvrx_rank(int(sys.argv[1]), {port}, {str(tf)!r}, {window}, {str(of)!r})")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError(f"NVRx replay failed: {logs[0][-600:]} {logs[1][-600:]}")
    return [tuple(f) for f in json.loads(of.read_text())]  # type: ignore[misc]


def nvrx_missing(env: dict[str, str]) -> str | None:
    """Why NVRx's scoring cannot run here (None when it can)."""
    p = subprocess.run([sys.executable, "-c", "import nvidia_resiliency_ext.straggler."
                        "reporting"], env=env, capture_output=True, text=True, timeout=120)
    return (p.stderr.strip().splitlines() or ["?"])[-1] if p.returncode else None


def _first(flags: list[tuple[int, int]], rank: int) -> int | None:
    """Steps from the first slow step to the first flag of `rank` (1: flagged on it)."""
    return next((s - SLOW_FROM + 1 for s, r in flags if r == rank), None)


def side_by_side(root: Path, env: dict[str, str], steps: int = 60,
                 clean_steps: int = 300) -> dict[str, Any]:
    slow, clean = record(root, env, steps, True), record(root, env, clean_steps, False)
    ours, ours_clean = rackscale_flags(slow), rackscale_flags(clean)
    out: dict[str, Any] = {
        "measured": True, "slow_rank": 1, "slow_factor": 1.5, "steps": len(slow),
        "clean_steps": len(clean),
        "rackscale": {"steps_to_detection": _first(ours, 1),
                      "wrong_rank_flags": sum(r != 1 for _, r in ours),
                      "false_flags_clean": len(ours_clean)}}
    why = nvrx_missing(env)
    if why is not None:
        out["nvrx"] = {"ran": False, "why": why}
        return out
    for window in (5, 10):
        theirs, theirs_clean = nvrx_flags(slow, window, root, env), \
            nvrx_flags(clean, window, root, env)
        out[f"nvrx_report_every_{window}"] = {
            "steps_to_detection": _first(theirs, 1),
            "wrong_rank_flags": sum(r != 1 for _, r in theirs),
            "false_flags_clean": len(theirs_clean)}
    return out
