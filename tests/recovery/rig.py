"""Real supervised jobs for the recovery tests: the supervisor as its own process (the CLI),
the reference trainer as its ranks, faults injected by signals to recorded pids."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).parents[2] / "src"
STEPS, EVERY, PACE = 30, 5, 0.12


def trainer_cmd(job_dir: Path, *extra: str, steps: int = STEPS) -> list[str]:
    return [sys.executable, "-m", "rackscale.recovery.trainer", "--steps", str(steps),
            "--pace-s", str(PACE), "--job-dir", str(job_dir), *extra]


def reference_digest(steps: int = STEPS, seed: int = 0) -> str:
    """The parameters' digest of an uninterrupted two-rank run of `trainer_cmd`'s training,
    computed in this process: both ranks' gradients on the one model, summed and halved as
    the trainer's all-reduce does. For two ranks that is exact (a + b is one IEEE addition
    whichever rank adds), so it equals a real gloo run bit for bit, in seconds."""
    import torch

    from rackscale.recovery.trainer import DemoSettings, batch_for, build_model, params_digest

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # as each rank runs
    s = DemoSettings(steps=steps, seed=seed)
    model = build_model(s)
    optim = torch.optim.Adam(model.parameters(), lr=s.lr)
    params = list(model.parameters())
    for step in range(1, steps + 1):
        flats = []
        for rank in (0, 1):
            x, y = batch_for(s, step, rank)
            optim.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(model(x), y).backward()
            flats.append(torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None]))
        flat = flats[0] + flats[1]
        flat /= 2
        offset = 0
        for p in params:
            if p.grad is not None:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        optim.step()
    return params_digest(model)


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


def start(job_dir: Path, cmd: list[str], *opts: str, gpus: int = 2, spares: int = 1,
          db: Path | None = None, ckpt_every: int | None = EVERY) -> subprocess.Popen[str]:
    """`rackscale job run` in the background, its JSON summary to `<job_dir>.out`
    (`ckpt_every` None: the job chooses its checkpoint interval)."""
    every = ["--ckpt-every", str(ckpt_every)] if ckpt_every is not None else []
    args = [sys.executable, "-m", "rackscale", "job", "run", "--gpus", str(gpus), "--spares",
            str(spares), *every, "--job-dir", str(job_dir), "--hang-floor-s", "5", *opts,
            "--json"]
    if db is not None:
        args += ["--db", f"sqlite:///{db}"]
    with Path(f"{job_dir}.out").open("w") as out:  # the child keeps its own copy
        # In the test's directory: without --db the job records in ./rackscale-data there.
        return subprocess.Popen([*args, "--", *cmd], env=env(), stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                cwd=job_dir.parent)


def finish(proc: subprocess.Popen[str], job_dir: Path, timeout_s: float = 400) -> tuple[int, Any]:
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the supervisor this test started, by its pid
        proc.wait(10)
        raise AssertionError(f"supervisor did not finish: {Path(f'{job_dir}.out').read_text()}"
                             ) from None
    text = Path(f"{job_dir}.out").read_text()
    start_ = text.find("{")
    try:  # the JSON summary (or error object); stderr's message may follow it
        return rc, json.JSONDecoder().raw_decode(text[start_:])[0] if start_ >= 0 else text
    except json.JSONDecodeError:
        return rc, text


def beats(job_dir: Path, attempt: int, rank: int) -> list[dict[str, Any]]:
    p = job_dir / "beats" / f"a{attempt:03d}-r{rank:04d}.jsonl"
    if not p.exists():
        return []
    return [json.loads(x) for x in p.read_text().splitlines() if x.endswith("}")]


def wait_step(job_dir: Path, attempt: int, rank: int, step: int, timeout_s: float = 240,
              proc: subprocess.Popen[str] | None = None) -> dict[str, Any]:
    """Block until `rank` of `attempt` reported step `step` done; its start beat (pid)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = beats(job_dir, attempt, rank)
        if any(b["phase"] == "step" and b["step"] >= step for b in got):
            return got[0]
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"supervisor ended early: {Path(f'{job_dir}.out').read_text()}")
        time.sleep(0.05)
    raise AssertionError(f"rank {rank} of attempt {attempt} never reached step {step}")


def incidents(job_dir: Path) -> list[dict[str, Any]]:
    p = job_dir / "incidents.jsonl"
    rows = [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
    return [r["payload"] for r in rows if r["kind"] == "recovery.incident"]


def result(job_dir: Path) -> dict[str, Any]:
    return json.loads((job_dir / "result.json").read_text())


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
