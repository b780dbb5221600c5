"""A job whose newest checkpoint is damaged resumes from the one before, says which it
skipped and why, and still ends with the parameters of an uninterrupted run."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from rackscale.checkpoint import Tiers, load_config
from tests.recovery import rig

pytestmark = pytest.mark.slow


def _wait_committed(job: Path, ckpt_id: str, timeout_s: float = 240) -> Tiers:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (job / "tiers.json").exists():
            tiers = Tiers(load_config(job / "tiers.json"))
            if tiers.read_manifest(tiers.region, ckpt_id) is not None:
                return tiers
        time.sleep(0.05)
    raise AssertionError(f"{ckpt_id} was never committed in the region")


def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(tmp_path: Path) -> None:
    job = tmp_path / "job"
    cmd = rig.trainer_cmd(job, "--pace-s", "0.5")  # 2.5 s between checkpoints
    sup = rig.start(job, cmd, spares=0)
    tiers = _wait_committed(job, "step-00000010")
    os.killpg(sup.pid, signal.SIGKILL)  # the supervisor (its ranks die with it)
    sup.wait(10)
    assert tiers.committed_ids(tiers.region) == ["step-00000005", "step-00000010"]
    m = tiers.read_manifest(tiers.region, "step-00000010")
    item = max(m.items, key=lambda i: i.size)
    obj = tiers.region.path(tiers.layout.data(m.id, item.name))
    raw = bytearray(obj.read_bytes())
    raw[len(raw) // 2] ^= 0x40  # one flipped bit in the region's only copy
    obj.write_bytes(bytes(raw))
    shutil.rmtree(job / "checkpoints" / "nodes")  # new nodes: nothing cached
    time.sleep(1)  # the old ranks notice their parent is gone
    rc, out = rig.finish(rig.start(job, cmd, spares=0), job)
    assert rc == 0, out
    assert rig.result(job)["resumed_from"] == "step-00000005"
    assert rig.result(job)["params_sha256"] == rig.reference_digest()
    said = [n for n in out["notes"] if "step-00000010 skipped" in n]
    assert said and f"region corrupt (damaged: {item.name} chunk" in said[0], out["notes"]
    assert "resuming from step-00000005" in said[0]
