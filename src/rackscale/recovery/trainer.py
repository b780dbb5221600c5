"""The reference trainer (`rackscale job train-demo`): a small MLP on deterministic synthetic
data, data-parallel over torch.distributed (gloo on CPU), one rank per process.

Deterministic on CPU (fixed seeds, deterministic algorithms, one thread, a fixed reduction
order), so an interrupted and resumed run ends with the same parameters, bit for bit, as an
uninterrupted one: the checkpoint holds the model, the optimizer (Adam moments and step) and
the data position. Checkpoints go through rackscale's DCP writer into the tiered store.

It talks to its supervisor only through the environment (`RANK`, `WORLD_SIZE`,
`MASTER_ADDR`/`MASTER_PORT` as torchrun sets them, plus `RACKSCALE_*`, see `RankEnv`) and the
heartbeat file; run alone it is a one-rank job.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import statistics
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist
from pydantic import BaseModel, ConfigDict, Field
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from rackscale.checkpoint import (
    AlreadyExists,
    TieredStorageReader,
    TieredStorageWriter,
    TiersConfig,
    UnknownCheckpoint,
    load_config,
)
from rackscale.durable import write_atomic
from rackscale.recovery.cadence import CADENCE_FILE, MTBF_ENV, MTBF_FROM_ENV, Cadence
from rackscale.recovery.heartbeat import HeartbeatWriter
from rackscale.recovery.warm import wait_for_rank


class DemoSettings(BaseModel):
    """The demo's model and data. `slow_slot`/`slow_factor` inject a fail-slow fault for drills:
    the rank on that slot does `slow_factor` times its compute work per step from step
    `slow_from` on (extra work burnt on the CPU, as a throttled GPU takes longer for the
    same step). `timing` is what a
    rank reports as its compute time: `cpu` (its own CPU time: on a host shared with other
    work, wall time would count the time other processes held the CPU) or `wall`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    steps: int = Field(default=100, ge=1)
    # None: chosen as the job runs (cadence.py) when the supervisor gives an MTBF, else 10
    ckpt_every: int | None = Field(default=10, ge=1)
    width: int = Field(default=256, ge=1, le=8192)
    depth: int = Field(default=3, ge=1, le=32)
    batch: int = Field(default=64, ge=1)
    features: int = Field(default=32, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    seed: int = Field(default=0, ge=0)
    pace_s: float = Field(default=0.0, ge=0)  # idle time per step (a longer step, for drills)
    slow_slot: str | None = None
    slow_factor: float = Field(default=1.0, ge=1.0)
    # The first slow step: a part that degrades mid-run (a rank slow from its first step is
    # as fast as its own best, and the detector does not flag it).
    slow_from: int = Field(default=1, ge=1)
    timing: Literal["cpu", "wall"] = "cpu"
    # Drill: the rank on `crash_slot` kills itself (SIGKILL) when it reaches `crash_step`:
    # once (a transient fault), or every time it runs there (`crash_persistent`: a bad node).
    crash_slot: str | None = None
    crash_step: int = Field(default=8, ge=1)
    crash_persistent: bool = False


class RankEnv(BaseModel):
    """What the supervisor hands each rank (environment variables)."""

    rank: int = 0
    world: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    job_dir: str = "."
    slot: str = "local"
    attempt: int = 0
    tiers_config: str | None = None  # RACKSCALE_CKPT_CONFIG: the job's tiers config file
    resume: str | None = None  # RACKSCALE_RESUME: the committed checkpoint id to restore

    @classmethod
    def from_environ(cls, job_dir: str) -> RankEnv:
        """Under `rackscale job run`, or under torchrun (its restart count is the attempt,
        its local rank the GPU; `RACKSCALE_RESUME=latest` restores the newest checkpoint)."""
        e = os.environ
        return cls(rank=int(e.get("RANK", 0)), world=int(e.get("WORLD_SIZE", 1)),
                   master_addr=e.get("MASTER_ADDR", "127.0.0.1"),
                   master_port=int(e.get("MASTER_PORT", 29500)),
                   job_dir=e.get("RACKSCALE_JOB_DIR", job_dir),
                   slot=e.get("RACKSCALE_SLOT", f"local/r01/c01/gpu{e.get('LOCAL_RANK', 0)}"),
                   attempt=int(e.get("RACKSCALE_ATTEMPT",
                                     e.get("TORCHELASTIC_RESTART_COUNT", 0))),
                   tiers_config=e.get("RACKSCALE_CKPT_CONFIG") or None,
                   resume=e.get("RACKSCALE_RESUME") or None)


def node_config(cfg: TiersConfig, slot: str) -> TiersConfig:
    """Each slot is its own node: its own local NVMe cache under the config's `local_dir`."""
    return cfg.model_copy(update={"local_dir": str(Path(cfg.local_dir) / slot.replace("/", "_"))})


def batch_for(s: DemoSettings, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data position is the step: rank r's batch of step n is a pure function of both."""
    g = torch.Generator().manual_seed(s.seed * 1_000_003 + step * 4099 + rank)
    x = torch.randn(s.batch, s.features, generator=g)
    return x, torch.sin(x.sum(dim=1, keepdim=True))


def build_model(s: DemoSettings) -> torch.nn.Module:
    torch.manual_seed(s.seed)
    layers: list[torch.nn.Module] = []
    width_in = s.features
    for _ in range(s.depth):
        layers += [torch.nn.Linear(width_in, s.width), torch.nn.Tanh()]
        width_in = s.width
    layers.append(torch.nn.Linear(width_in, 1))
    return torch.nn.Sequential(*layers)


def params_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def _watch_parent() -> None:
    """Leave when the supervisor is gone even where PR_SET_PDEATHSIG does not reach (a launch
    prefix that forks); bounded by the process's life, polled every half second."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _state(model: torch.nn.Module, optim: torch.optim.Optimizer, step: int) -> dict[str, Any]:
    msd, osd = get_state_dict(model, optim)
    return {"model": msd, "optim": osd, "data": {"next_step": torch.tensor(step + 1)}}


def _restore(env: RankEnv, cfg: TiersConfig, model: torch.nn.Module,
             optim: torch.optim.Optimizer) -> int:
    """Load the committed checkpoint `env.resume` into model and optimizer; the next step
    (1 when `latest` was asked for and there is none yet)."""
    state = _state(model, optim, -1)
    try:
        reader = TieredStorageReader(cfg, env.resume or "latest")
    except UnknownCheckpoint:
        if env.resume != "latest":
            raise
        return 1
    dcp_load(state, storage_reader=reader)
    set_state_dict(model, optim, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])
    return int(state["data"]["next_step"])


def _burn(x: torch.Tensor, clock: Any, until: float) -> None:
    """The slow drill's extra work: matrix products (results unused) until `until`."""
    scratch = x.T @ x
    while clock() < until:
        scratch = torch.tanh(scratch @ scratch)


def _crash(s: DemoSettings, env: RankEnv) -> None:
    """The crash drill: a transient fault fires once per job directory, a persistent one
    every time (the marker file records that it fired)."""
    mark = Path(env.job_dir) / f"crashed-{env.slot.replace('/', '_')}"
    if s.crash_persistent or not mark.exists():
        mark.touch()
        os.kill(os.getpid(), signal.SIGKILL)


def _ckpt_busy() -> bool:
    """Whether checkpoint work of this process is running: the tiers' save, upload and hash
    threads (`ckpt-*`), alive only while a save or its push to the tiers is in flight."""
    return any(t.name.startswith("ckpt-") for t in threading.enumerate())


def _allreduce_grads(model: torch.nn.Module, world: int, flag: float | None = None) -> bool:
    """Average the gradients over the ranks; with `flag` (rank 0's decision to save this step,
    0 from the others) one element more rides along, and every rank learns it: True when
    rank 0 set it. Without `flag` the reduction is the plain one (a fixed cadence)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads]
                     + ([torch.tensor([flag])] if flag is not None else []))
    if world > 1:
        dist.all_reduce(flat)
        flat /= world
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return flag is not None and bool(flat[-1] > 0)


def _cadence(s: DemoSettings, env: RankEnv) -> Cadence | None:
    """The chosen cadence's keeper on rank 0 (None elsewhere, or with a fixed --ckpt-every)."""
    mtbf = os.environ.get(MTBF_ENV)
    if s.ckpt_every is not None or not mtbf or env.rank != 0:
        return None
    return Cadence(mtbf_s=float(mtbf), mtbf_from=os.environ.get(MTBF_FROM_ENV, "given"),
                   out=Path(env.job_dir) / CADENCE_FILE)


def _save(cfg: TiersConfig, model: torch.nn.Module, optim: torch.optim.Optimizer,
          step: int) -> None:
    # A rerun of a step whose checkpoint some tier already holds (the job went back past
    # it, e.g. because it did not verify): it is never overwritten, so the save is refused,
    # on every rank; training goes on and saves the steps after it.
    try:
        dcp_save(_state(model, optim, step), storage_writer=TieredStorageWriter(cfg, step))
    except AlreadyExists:
        return
    except CheckpointException as err:  # DCP hands each rank every rank's refusal
        if not err.failures or not all(isinstance(exc, AlreadyExists)
                                       for exc, _trace in err.failures.values()):
            raise


def train(s: DemoSettings, env: RankEnv) -> dict[str, Any]:
    """Run (or resume) the demo job; returns rank 0's result (also written to result.json)."""
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    _watch_parent()
    hb = HeartbeatWriter(Path(env.job_dir) / "beats" /
                         f"a{env.attempt:03d}-r{env.rank:04d}.jsonl")
    hb.beat("start", 0, slot=env.slot, pid=os.getpid())
    os.environ.update(MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port))
    dist.init_process_group("gloo", rank=env.rank, world_size=env.world,
                            timeout=timedelta(minutes=30))
    try:
        return _run(s, env, hb)
    finally:
        dist.destroy_process_group()
        hb.close()


def _run(s: DemoSettings, env: RankEnv, hb: HeartbeatWriter) -> dict[str, Any]:
    cfg = node_config(load_config(env.tiers_config), env.slot) if env.tiers_config else None
    model = build_model(s)
    optim = torch.optim.Adam(model.parameters(), lr=s.lr)
    t0 = time.time()
    start = _restore(env, cfg, model, optim) if (env.resume and cfg) else 1
    hb.beat("restored", start - 1, restore_s=round(time.time() - t0, 6), ckpt=env.resume)
    slow = s.slow_factor if s.slow_slot == env.slot else 1.0
    adaptive = s.ckpt_every is None and bool(os.environ.get(MTBF_ENV))
    every = s.ckpt_every or 10
    cad, plain_steps = _cadence(s, env), list[float]()
    clock = time.thread_time if s.timing == "cpu" else time.perf_counter
    loss = torch.tensor(0.0)
    for step in range(start, s.steps + 1):
        began, c0, busy = time.perf_counter(), clock(), _ckpt_busy()
        x, y = batch_for(s, step, env.rank)
        optim.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        torch.autograd.backward(loss)  # = loss.backward(), whose signature is unannotated
        if slow > 1.0 and step >= s.slow_from:
            _burn(x, clock, c0 + slow * (clock() - c0))
        if s.crash_slot == env.slot and step == s.crash_step:
            _crash(s, env)
        # A compute that overlapped checkpoint work says so: the detector does not score it.
        busy = busy or _ckpt_busy()
        hb.beat("sync", step, compute_s=round(clock() - c0, 6), **({"ckpt": True} if busy
                                                                   else {}))
        flag = (1.0 if cad is not None and cad.due() else 0.0) if adaptive else None
        chosen = _allreduce_grads(model, env.world, flag)
        due = chosen if adaptive else step % every == 0
        optim.step()
        saved: dict[str, float] = {}
        if cfg is not None and due and step < s.steps:
            t_save = time.perf_counter()
            _save(cfg, model, optim, step)
            saved["saved_s"] = round(time.perf_counter() - t_save, 6)  # the loop's stall
            if cad is not None:
                cad.saved(saved["saved_s"], statistics.median(plain_steps[-20:])
                          if plain_steps else None, step)
        if s.pace_s:
            time.sleep(s.pace_s)
        step_s = time.perf_counter() - began
        if not saved:
            plain_steps.append(step_s)
        hb.beat("step", step, step_s=round(step_s, 6), **saved)
    result = {"steps": s.steps, "params_sha256": params_digest(model),
              "loss": float(loss.detach()), "world": env.world, "resumed_from": env.resume}
    if env.rank == 0:
        write_atomic(Path(env.job_dir) / "result.json", json.dumps(result, indent=2))
    hb.beat("done", s.steps)
    return result


def main(argv: list[str] | None = None) -> None:
    """`python -m rackscale.recovery.trainer --steps 30 ...`: the trainer without the CLI's
    imports (a rank starts faster); options are DemoSettings' fields, `--job-dir` as the CLI."""
    import argparse

    ap = argparse.ArgumentParser(prog="rackscale.recovery.trainer")
    for name, f in DemoSettings.model_fields.items():
        kind = int if f.annotation is int else float if f.annotation is float else str
        ap.add_argument(f"--{name.replace('_', '-')}", type=kind, default=None)
    ap.add_argument("--job-dir", default=".")
    args = vars(ap.parse_args(argv))
    job_dir = args.pop("job_dir")
    env_default = {"steps": "RACKSCALE_STEPS", "ckpt_every": "RACKSCALE_CKPT_EVERY"}
    for key, var in env_default.items():
        if args[key] is None and os.environ.get(var):
            args[key] = int(os.environ[var])
    given = {k: v for k, v in args.items() if v is not None}
    if args["ckpt_every"] is None and os.environ.get(MTBF_ENV):
        given["ckpt_every"] = None  # chosen as the job runs (cadence.py)
    s = DemoSettings(**given)
    Path(job_dir).mkdir(parents=True, exist_ok=True)
    wait_for_rank()  # a standby waits here, its imports done, for its rank
    train(s, RankEnv.from_environ(job_dir))


if __name__ == "__main__":
    main()
