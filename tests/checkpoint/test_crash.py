"""Crash safety: SIGKILL the saver at >= 50 random points of save, upload and cross-region copy.

Each round forks a saver that first resumes what the previous one left and then saves new
checkpoints; the parent reads its progress events and kills it with SIGKILL after a random
number of them. After every kill the region's `latest` must be the previous or a newer
complete checkpoint (never backwards, never partial); at the end every committed manifest in
every tier must verify chunk by chunk, and parts re-sent must stay within what was in flight.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import numpy as np

from rackscale.checkpoint import CheckpointManager, ObjectMissing, Restorer, Tiers, parse_config
from tests.checkpoint.conftest import s3_config

KILLS = 50
ITEM = (5 << 20) + (256 << 10)  # 2 parts of 5 MiB: part 2 is short


def payload(step: int) -> dict:
    rng = np.random.default_rng(step)
    return {"weights": rng.integers(0, 255, ITEM, dtype=np.uint8),
            "meta": json.dumps({"step": step}).encode()}


def saver(cfg: dict, first_step: int, wfd: int) -> None:
    def hook(kind: str, data: dict) -> None:
        os.write(wfd, (json.dumps({"kind": kind, **data}) + "\n").encode())

    with CheckpointManager(parse_config(cfg), events=hook) as mgr:
        mgr.resume()
        for step in range(first_step, first_step + 50):
            mgr.save(step, payload(step)).wait()
    os._exit(0)


def read_latest(tiers: Tiers) -> int:
    try:
        return int(json.loads(tiers.region.get(tiers.layout.latest))["step"])
    except ObjectMissing:  # no checkpoint reached the region yet
        return 0


def test_sigkill_at_random_points_never_accepts_a_partial_checkpoint(tmp_path: Path,
                                                                     regions: tuple) -> None:
    cfg = s3_config(tmp_path, *regions, archive=None, upload_parallelism=2)
    tiers = Tiers(parse_config(cfg))
    rnd = random.Random(5)
    ctx = mp.get_context("fork")
    begins: Counter[tuple] = Counter()
    phases: Counter[str] = Counter()
    kept_on_resume = 0
    latest_seen = 0
    step = 1
    for _ in range(KILLS):
        rfd, wfd = os.pipe()
        proc = ctx.Process(target=saver, args=(cfg, step, wfd))
        proc.start()
        os.close(wfd)
        target, seen, buf, last = rnd.randint(1, 16), 0, b"", "start"
        killed = False
        with os.fdopen(rfd, "rb", buffering=0) as r:
            while True:  # after the kill, drain what the saver wrote before it died
                chunk = r.read(4096)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    ev = json.loads(line)
                    seen += 1
                    if not killed:  # the phase the kill landed in: copy = to the other region
                        last = ("copy." if ev.get("tier") == "us-west" else "") + ev["kind"]
                    if ev["kind"] == "stage.done":
                        step = max(step, int(ev["id"].split("-")[1]) + 1)
                    if ev["kind"] == "upload.part.begin":
                        begins[(ev["tier"], ev["id"], ev["item"], ev["part"])] += 1
                    if ev["kind"] == "upload.resume":
                        kept_on_resume += ev["parts_kept"]
                if seen >= target and not killed:
                    # land inside a part or a write, not only between two events
                    time.sleep(rnd.random() * 0.02)
                    os.kill(proc.pid, signal.SIGKILL)
                    killed = True
        proc.join(10)
        assert proc.exitcode == -signal.SIGKILL
        phases[last.split(".")[0]] += 1
        now = read_latest(tiers)
        assert now >= latest_seen, "latest went backwards after a kill"
        if now:
            ck = f"step-{now:08d}"
            assert Restorer(tiers).verify(ck, tiers.region)["ok"], f"latest {ck} corrupt"
        latest_seen = now
    # A last saver finishes every interrupted checkpoint.
    with CheckpointManager(parse_config(cfg)) as mgr:
        mgr.resume()
    assert {"stage", "local", "upload", "copy"} <= set(phases), phases
    assert phases["upload"] + phases["copy"] >= 10, phases
    assert kept_on_resume > 0, "no interrupted upload kept any part: uploads restarted"
    resent = sum(n - 1 for n in begins.values())
    # Each kill can lose at most the parts in flight (the part pool's size), never the upload.
    assert resent <= (phases["upload"] + phases["copy"]) * cfg["upload_parallelism"], (
        resent, phases)
    # Every committed manifest in every tier verifies, and its content is that step's payload.
    shutil.rmtree(tiers.local.root)
    fresh = Tiers(parse_config(cfg))
    for store in fresh.remote:
        ids = fresh.committed_ids(store)
        assert ids, store.name
        for ck in ids:
            assert Restorer(fresh).verify(ck, store)["ok"], (store.name, ck)
    for ck in fresh.committed_ids(fresh.region)[-3:]:
        got, _ = Restorer(fresh).load_state(ck)
        assert np.array_equal(got["weights"], payload(int(ck.split("-")[1]))["weights"])
    print(f"kills by phase: {dict(phases)}; parts kept on resume: {kept_on_resume}; "
          f"parts sent {sum(begins.values())}, re-sent {resent}")
