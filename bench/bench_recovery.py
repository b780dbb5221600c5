"""Recovery benchmark: the same fail-stop under `torchrun --max-restarts` (the anchor) and
under `rackscale job run`, side by side in one run, on real gloo ranks (CPU).

1. Transient fault: rank 1's process is killed (SIGKILL) once at step 8. Time to recover =
   from the killed rank's last heartbeat to every rank's first completed step after the
   restart; both restore the latest committed checkpoint through the same DCP reader.
   rackscale runs with its default options (warm standby processes per GPU slot); the full
   run also shows it with `--cold` (`rackscale_cold`). Target: rackscale <= 0.5x torchrun.
2. Persistent fault: the GPU under rank 1 kills its rank every time it reaches step 8 (a bad
   node). torchrun restarts on the same GPU until --max-restarts runs out and the job fails;
   rackscale excludes the GPU, moves rank 1 to a spare and finishes. Target: rackscale
   finishes, torchrun does not.

3. Straggler detection (`--straggler`, also part of the full run): rackscale's detector and
   nvidia-resiliency-ext's scoring on the same measured section times of a 1.5x-slowed rank
   and of a clean run (bench/straggler_nvrx.py says how). Target: rackscale flags the slow
   rank within 10 steps, and nothing in the clean run. `--nvrx-path DIR` adds a directory
   where NVRx was installed (`pip install --target DIR nvidia-resiliency-ext`).

    PYTHONPATH=src python bench/bench_recovery.py [--quick] [--straggler] [--json OUT]

Every figure is measured on this host (wall clock); none is simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.recovery import job_tiers

SRC = Path(__file__).parents[1] / "src"
PY = sys.executable


def _env(job: Path, tiers: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "RACKSCALE_CKPT_CONFIG": str(tiers), "RACKSCALE_JOB_DIR": str(job),
            "RACKSCALE_RESUME": "latest", "OMP_NUM_THREADS": "1"}


def _trainer(job: Path, steps: int, persistent: bool) -> list[str]:
    return ["-m", "rackscale.recovery.trainer", "--steps", str(steps), "--ckpt-every", "5",
            "--pace-s", "0.05", "--job-dir", str(job), "--crash-slot", "local/r01/c01/gpu1",
            "--crash-step", "8", "--crash-persistent", str(persistent).lower()]


def _beats(job: Path) -> dict[tuple[int, int], list[dict[str, Any]]]:
    out = {}
    for p in sorted((job / "beats").glob("a*-r*.jsonl")):
        a, r = p.stem[1:].split("-r")
        out[(int(a), int(r))] = [json.loads(x) for x in p.read_text().splitlines()
                                 if x.endswith("}")]
    return out


def _recovery_s(job: Path) -> float | None:
    """Killed rank's last beat of the first attempt -> the first later attempt in which every
    rank completed a step (a restart that failed again counts in the time)."""
    beats = _beats(job)
    attempts = sorted({a for a, _ in beats})
    if len(attempts) < 2:
        return None
    last = max(b["t"] for b in beats.get((attempts[0], 1), []) or [{"t": 0}])
    for a in attempts[1:]:
        firsts = [next((b["t"] for b in beats.get((a, r), []) if b["phase"] == "step"), None)
                  for r in (0, 1)]
        if None not in firsts:
            return round(max(firsts) - last, 3)  # type: ignore[type-var]
    return None


def _run_torchrun(root: Path, steps: int, persistent: bool) -> dict[str, Any]:
    job = root / f"torchrun-{'persistent' if persistent else 'transient'}"
    job.mkdir(parents=True)
    tiers = job / "tiers.json"
    write_atomic(tiers, job_tiers(job).model_dump_json())
    t0 = time.perf_counter()
    cmd = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", "2", "--monitor-interval", "0.1",
           *_trainer(job, steps, persistent)]
    try:
        p = subprocess.run(cmd, env=_env(job, tiers), capture_output=True, text=True,
                           timeout=400)
        rc, errors = p.returncode, [ln.strip() for ln in p.stderr.splitlines()
                                    if "Error" in ln][:3]
    except subprocess.TimeoutExpired:  # subprocess.run killed it (and waited)
        rc, errors = -1, ["torchrun did not end within 400 s"]
    return {"finished": rc == 0 and (job / "result.json").exists(), "errors": errors,
            "recover_s": _recovery_s(job), "wall_s": round(time.perf_counter() - t0, 2),
            "attempts": len({a for a, _ in _beats(job)})}


def _run_rackscale(root: Path, steps: int, persistent: bool, *,
                   cold: bool = False) -> dict[str, Any]:
    """`job run` with its default options, or with `--cold` (no standby processes)."""
    job = root / f"rackscale-{'persistent' if persistent else 'transient'}-" \
        f"{'cold' if cold else 'default'}"
    env = _env(job, job / "tiers.json")
    for k in ("RACKSCALE_CKPT_CONFIG", "RACKSCALE_JOB_DIR", "RACKSCALE_RESUME"):
        env.pop(k)  # the supervisor sets them per rank
    t0 = time.perf_counter()
    p = subprocess.run([PY, "-m", "rackscale", "job", "run", "--job-gpus", "2", "--spares", "1",
                        "--ckpt-every", "5", "--job-dir", str(job), "--max-restarts", "2",
                        *(["--cold"] if cold else []), "--json", "--", PY,
                        *_trainer(job, steps, persistent)], env=env,
                       capture_output=True, text=True, timeout=900)
    inc = [json.loads(x)["payload"] for x in (job / "incidents.jsonl").read_text().splitlines()
           if '"recovery.incident"' in x] if (job / "incidents.jsonl").exists() else []
    return {"finished": p.returncode == 0 and (job / "result.json").exists(),
            "recover_s": _recovery_s(job), "wall_s": round(time.perf_counter() - t0, 2),
            "attempts": len({a for a, _ in _beats(job)}),
            "incident": {k: inc[0].get(k) for k in ("detect_s", "stop_s", "restart_s",
                                                     "start_s", "restore_s", "first_step_s",
                                                     "work_lost_steps")} if inc else None}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="the transient case only")
    ap.add_argument("--straggler", action="store_true", help="the straggler case only")
    ap.add_argument("--nvrx-path", metavar="DIR", help="where nvidia-resiliency-ext is")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    steps = 20
    out: dict[str, Any] = {"measured": True, "host": "this host, CPU, gloo, 2 ranks"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.straggler or not args.quick:
            out["straggler"] = _straggler(root, args.nvrx_path)
        if args.straggler:
            return _emit(out, args.json, _straggler_ok(out["straggler"]))
        cases = [False] if args.quick else [False, True]
        for persistent in cases:
            name = "persistent" if persistent else "transient"
            out[name] = {"torchrun": _run_torchrun(root, steps, persistent),
                         "rackscale": _run_rackscale(root, steps, persistent)}
            if not args.quick and not persistent:  # without standbys: every rank starts cold
                out[name]["rackscale_cold"] = _run_rackscale(root, steps, persistent, cold=True)
    tr = out["transient"]
    ratio = None
    if tr["torchrun"]["recover_s"] and tr["rackscale"]["recover_s"]:
        ratio = round(tr["rackscale"]["recover_s"] / tr["torchrun"]["recover_s"], 3)
    out["transient"]["ratio_rackscale_over_torchrun"] = ratio
    ok = bool(tr["torchrun"]["finished"] and tr["rackscale"]["finished"] and ratio is not None
              and ratio <= 0.5)
    if "persistent" in out:
        ps = out["persistent"]
        ok = ok and ps["rackscale"]["finished"] and not ps["torchrun"]["finished"]
    if "straggler" in out:
        ok = ok and _straggler_ok(out["straggler"])
    return _emit(out, args.json, ok)


def _straggler(root: Path, nvrx_path: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).parent))
    from straggler_nvrx import side_by_side

    env = _env(root, root / "tiers.json")
    for k in ("RACKSCALE_CKPT_CONFIG", "RACKSCALE_JOB_DIR", "RACKSCALE_RESUME"):
        env.pop(k)
    if nvrx_path:
        env["PYTHONPATH"] = f"{env['PYTHONPATH']}{os.pathsep}{nvrx_path}"
    return side_by_side(root, env)


def _straggler_ok(res: dict[str, Any]) -> bool:
    ours = res["rackscale"]
    return bool(ours["steps_to_detection"] is not None and ours["steps_to_detection"] <= 10
                and not ours["wrong_rank_flags"] and not ours["false_flags_clean"])


def _emit(out: dict[str, Any], path: str | None, ok: bool) -> int:
    out["targets_met"] = ok
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).write_text(text + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
