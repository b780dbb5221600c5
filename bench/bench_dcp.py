"""DCP through the tiers side by side with torch's FileSystemWriter/Reader on the same disk:
`python bench/bench_dcp.py [--quick] [--size-mib N] [--files N] [--only a,b] [--repeat N]
[--worlds 1,2] [--json]`.

Every ratio is against a baseline measured in the same run (all figures measured, real):
- save (world 1 and 2): FileSystemWriter vs the tiered writer returning once the local tier
  is durable (`wait_for_tiers=False`; goal <= 1.3x) and vs the full save through a region and
  a replica, directory tiers on the same disk (`wait_for_tiers=True`; goal <= 3x, it writes
  three copies);
- load: FileSystemReader vs the tiered reader on a fresh node (every chunk verified);
- many files (`single_file_per_rank=False`, N-1 tensors + .metadata): local-durable save vs
  FileSystemWriter (goal <= 2x);
- S3: one file to SeaweedFS through the tiers' uploader vs boto3 `upload_file` (goal >= 80%);
  4 ranks with 4 local directories saving to one S3 region vs 4 parallel `upload_file`s;
- peak RSS of a save (fresh interpreter each) vs FileSystemWriter's (goal <= 1.2x).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

MiB = 1 << 20


def state(mib: int, world: int, rank: int, tensors: int = 8) -> dict:
    """`mib` in all, each rank its own keys: DCP writes a key that every rank holds only
    once (it is replicated), so shared keys would make a world-2 save write half the bytes."""
    import torch
    each = max(1, (mib * MiB) // 4 // tensors // world)
    return {f"rank{rank}.layer{i}.weight": torch.full((each,), float(i * world + rank))
            for i in range(tensors)}


def tiers(root: Path, node: str, *, region: bool = True, replica: bool = True,
          s3: dict | None = None) -> dict:
    cfg: dict = {"local_dir": str(root / node),
                 "region": s3 or {"name": "us-east", "kind": "dir", "path": str(root / "east")}}
    if replica and not s3:
        cfg["replicas"] = [{"name": "us-west", "kind": "dir", "path": str(root / "west")}]
    return cfg


def _rank(rank: int, world: int, port: int, job: dict, q: Any) -> None:
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter

    from rackscale.checkpoint import parse_config
    from rackscale.checkpoint.dcp import TieredStorageReader, TieredStorageWriter

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=300))
    kind, root = job["kind"], Path(job["root"])
    opts = {"single_file_per_rank": False} if job.get("many") else {}
    sd = state(job["mib"], world, rank, job.get("tensors", 8))
    cfg = parse_config(tiers(root, f"node{rank}", s3=job.get("s3")))
    if kind == "fs_save":
        w: Any = FileSystemWriter(root / "fs", **opts)
    elif kind in ("tiered_local", "tiered_full"):
        w = TieredStorageWriter(cfg, 1, wait_for_tiers=kind == "tiered_full", **opts)
    dist.barrier()
    t0 = time.perf_counter()
    if kind in ("fs_save", "tiered_local", "tiered_full"):
        dcp.save(sd, storage_writer=w)
    elif kind == "fs_load":
        dcp.load(sd, storage_reader=FileSystemReader(root / "fs"))
    else:
        fresh = parse_config(tiers(root, f"fresh{rank}"))
        dcp.load(sd, storage_reader=TieredStorageReader(fresh, "latest"))
    dist.barrier()
    dt = time.perf_counter() - t0
    if kind == "tiered_local" and w.handle is not None:
        w.handle.wait()  # the background pushes finish outside the timed part
    if kind.startswith("tiered_") and "load" not in kind:
        # A figure counts only for a save that reached every tier.
        rep = w.report if kind == "tiered_full" else w.handle.wait()
        if rep is None or rep.errors or "region" not in rep.states:
            raise RuntimeError(f"{kind}: the save did not reach the tiers: {rep}")
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        q.put(dt)


def settle() -> None:
    """Every timed run starts from the same disk: the previous run's dirty pages written back
    (and, as root, the page cache dropped), so no run pays for the one before it."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1")
    except OSError:
        pass  # not root or not Linux: the writeback alone still evens the runs out


def run(kind: str, world: int, root: Path, mib: int, **extra: Any) -> float:
    from rackscale.checkpoint.seaweed import free_port

    settle()
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    job = {"kind": kind, "root": str(root), "mib": mib, **extra}
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, job, q)) for r in range(world)]
    for p in procs:
        p.start()
    dt = q.get(timeout=900)
    for p in procs:
        p.join(60)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"{kind} world {world}: exit codes {[p.exitcode for p in procs]}")
    return dt


def fresh(base: Path, name: str) -> Path:
    d = base / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def line(log: list, what: str, ours: float, base: float, base_name: str, goal: str,
         rounds: list[float] | None = None) -> None:
    """One figure; `rounds`: each round's own ratio (its runs shared the machine's state)."""
    ratio = ours / base if base else float("inf")
    log.append({"what": what, "ours_s": ours, "baseline_s": base, "baseline": base_name,
                "ratio": ratio, "goal": goal, "round_ratios": rounds or []})
    each = f"  rounds {' '.join(f'{r:.2f}' for r in rounds)}" if rounds and len(rounds) > 1 \
        else ""
    print(f"{what:<58} {ours:8.3f} s  {base_name} {base:8.3f} s  {ratio:5.2f}x  (goal {goal})"
          f"{each}", flush=True)


def bench_save_load(work: Path, mib: int, out: list, repeat: int = 3,
                    worlds: tuple[int, ...] = (1, 2), loads: bool = True) -> None:
    """Each figure is the median of `repeat` rounds; a round runs FileSystemWriter and both
    tiered saves one after the other, so a change in the machine's load hits all three (each
    round's own ratios are printed beside the medians: the disk's speed moves between rounds)."""
    for world in worlds:
        times: dict[str, list[float]] = {k: [] for k in ("fs", "local", "full", "fsl", "load")}
        for _ in range(repeat):
            d = fresh(work, f"w{world}")
            times["fs"].append(run("fs_save", world, d, mib))
            times["local"].append(run("tiered_local", world, fresh(work, f"w{world}-l"), mib))
            full_root = fresh(work, f"w{world}-f")
            times["full"].append(run("tiered_full", world, full_root, mib))
            if loads:
                times["fsl"].append(run("fs_load", world, d, mib))
                times["load"].append(run("tiered_load", world, full_root, mib))
            for p in (d, work / f"w{world}-l", full_root):
                shutil.rmtree(p, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in times.items() if v}
        per = {k: [a / b for a, b in zip(times[k], times[base], strict=True)]
               for k, base in (("local", "fs"), ("full", "fs"), ("load", "fsl")) if times[k]}
        n = f" (median of {repeat})" if repeat > 1 else ""
        line(out, f"save {mib} MiB world {world}: local durable{n}", med["local"], med["fs"],
             "FSWriter", "<= 1.3x", per["local"])
        line(out, f"save {mib} MiB world {world}: + region + replica{n}", med["full"],
             med["fs"], "FSWriter", "<= 3x", per["full"])
        if loads:
            line(out, f"load {mib} MiB world {world}: fresh node, from region{n}",
                 med["load"], med["fsl"], "FSReader", "(info)", per["load"])


def bench_many(work: Path, files: int, out: list) -> None:
    mib = max(8, files // 100)
    extra = {"many": True, "tensors": files - 1}
    fs = run("fs_save", 1, fresh(work, "many-fs"), mib, **extra)
    ours = run("tiered_local", 1, fresh(work, "many-l"), mib, **extra)
    line(out, f"save {files} files ({mib} MiB): local durable", ours, fs, "FSWriter", "<= 2x")


def _s3(work: Path) -> Any:
    from rackscale.checkpoint.seaweed import SeaweedFS
    return SeaweedFS(fresh(work, "weed"), name="us-east").start()


def bench_s3(work: Path, mib: int, out: list) -> None:
    from rackscale.checkpoint import Tiers, parse_config
    from rackscale.checkpoint.upload import Uploader, UploadStats

    weed = _s3(work)
    try:
        store = weed.store("bench")
        root = fresh(work, "s3")
        cfg = parse_config(tiers(root, "node0", s3=weed.spec("bench")))
        t = Tiers(cfg)
        data = t.local.path(t.layout.data_prefix("up"))
        data.mkdir(parents=True)
        blob = data / "blob"
        with open(blob, "wb") as f:
            for _ in range(mib):
                f.write(os.urandom(MiB))
        t0 = time.perf_counter()
        store.client.upload_file(str(blob), "bench", "boto3/blob")
        boto = time.perf_counter() - t0
        with ThreadPoolExecutor(cfg.upload_parallelism) as pool:
            journal = t.open_journal("up", "bench")
            t0 = time.perf_counter()
            Uploader(t, pool).upload_items(t.region, "up", ["blob"], UploadStats(), journal)
            ours = time.perf_counter() - t0
            journal.drop()
        line(out, f"S3 upload {mib} MiB (tiers' uploader vs boto3)", ours, boto,
             "upload_file", ">= 80% of boto3 speed = <= 1.25x time")
        # Four nodes, four local directories, one S3 region: each rank uploads its own files.
        four = fresh(work, "s3-4")
        ours4 = run("tiered_full", 4, four, mib, s3=weed.spec("bench"))
        files = sorted(four.glob("node*/cache/ckpt/step-00000001/data/__*"))
        t0 = time.perf_counter()
        with ThreadPoolExecutor(len(files)) as pool:
            list(pool.map(lambda p: store.client.upload_file(str(p), "bench",
                                                             f"boto3/{p.name}"), files))
        boto4 = time.perf_counter() - t0
        line(out, f"save {mib} MiB, 4 ranks, 4 local dirs -> S3 (full)", ours4, boto4,
             "4x upload_file", "(info: ours also writes + hashes)")
    finally:
        weed.stop()


PEAK = """
import resource, sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from rackscale.checkpoint import parse_config
from rackscale.checkpoint.dcp import TieredStorageWriter
mode, root, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
sd = {f"t{i}": torch.full(((mib << 20) // 32,), float(i)) for i in range(8)}
cfg = parse_config({"local_dir": root + "/local",
                    "region": {"name": "r", "kind": "dir", "path": root + "/region"}})
w = FileSystemWriter(root + "/fs") if mode == "fs" else TieredStorageWriter(cfg, 1)
dcp.save(sd, storage_writer=w)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_rss(work: Path, mib: int, out: list) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    peaks = {}
    for mode in ("fs", "tiered"):
        root = fresh(work, f"rss-{mode}")
        r = subprocess.run([sys.executable, "-c", PEAK, mode, str(root), str(mib)], env=env,
                           capture_output=True, text=True, timeout=600, check=True)
        peaks[mode] = int(r.stdout.split()[-1]) / 1024
        shutil.rmtree(root, ignore_errors=True)
    out.append({"what": f"peak RSS, save {mib} MiB", "ours_mib": peaks["tiered"],
                "baseline_mib": peaks["fs"], "ratio": peaks["tiered"] / peaks["fs"],
                "goal": "<= 1.2x"})
    print(f"{'peak RSS, save ' + str(mib) + ' MiB (full, region)':<58} "
          f"{peaks['tiered']:8.0f} MiB  FSWriter {peaks['fs']:8.0f} MiB  "
          f"{peaks['tiered'] / peaks['fs']:5.2f}x  (goal <= 1.2x)", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="64 MiB, 501 files (CI smoke)")
    ap.add_argument("--size-mib", type=int, default=None, help="state dict size (1024)")
    ap.add_argument("--files", type=int, default=None, help="many-file case (5001)")
    ap.add_argument("--only", default="save,load,many,s3,rss")
    ap.add_argument("--worlds", default="1,2", help="world sizes of the save/load figures")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of the save/load figures "
                    "(the median is reported)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    mib = args.size_mib or (64 if args.quick else 1024)
    files = args.files or (501 if args.quick else 5001)
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-dcp-"))
    # A SIGTERM unwinds like Ctrl-C, so the finally blocks stop SeaweedFS and remove `work`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    only = set(args.only.split(","))
    out: list = []
    print(f"all figures measured on this machine ({os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.1f}), work dir {work}", flush=True)
    try:
        if "save" in only:
            bench_save_load(work, mib, out, max(1, args.repeat),
                            tuple(int(w) for w in args.worlds.split(",")), "load" in only)
        if "many" in only:
            bench_many(work, files, out)
        if "s3" in only:
            bench_s3(work, mib, out)
        if "rss" in only:
            bench_rss(work, mib, out)
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(f"peak RSS of this driver: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}"
          f" MiB")
    if args.json:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
