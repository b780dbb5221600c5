"""`checkpoint import` adopts a checkpoint written by torch's own FileSystemWriter; a save
through the tiers hashes files streaming, so its peak RSS stays within 1.2x of
FileSystemWriter's for the same state dict (each measured in a fresh interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from typer.testing import CliRunner

from rackscale.checkpoint import parse_config
from rackscale.checkpoint.dcp import TieredStorageReader
from rackscale.cli import app

runner = CliRunner()


def tiers_cfg(tmp: Path, node: str) -> dict:
    return {"local_dir": str(tmp / node),
            "region": {"name": "us-east", "kind": "dir", "path": str(tmp / "us-east")},
            "replicas": [{"name": "us-west", "kind": "dir", "path": str(tmp / "us-west")}],
            "chunk_size": 1 << 16, "part_size": 1 << 18}


def test_import_a_filesystemwriter_checkpoint(tmp_path: Path) -> None:
    sd = {"w": torch.randn(300, 70), "ids": torch.arange(1000), "h": torch.randn(33).half()}
    dcp.save(sd, storage_writer=FileSystemWriter(tmp_path / "torch-ckpt"))
    cfg_file = tmp_path / "tiers.json"
    cfg_file.write_text(json.dumps(tiers_cfg(tmp_path, "node")))
    args = ["checkpoint", "import", str(tmp_path / "torch-ckpt"), "--step", "7",
            "--config", str(cfg_file)]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["id"] == "step-00000007" and "replicated" in rep["states"], rep
    # A fresh node reads it through the tiers, verified, exactly.
    out = {k: torch.zeros_like(v) for k, v in sd.items()}
    reader = TieredStorageReader(parse_config(tiers_cfg(tmp_path, "fresh")), "latest")
    dcp.load(out, storage_reader=reader)
    assert reader.restore_report.id == "step-00000007"
    assert all(torch.equal(out[k], sd[k]) for k in sd)
    r = runner.invoke(app, ["checkpoint", "verify", "step-00000007", "--config", str(cfg_file)])
    assert r.exit_code == 0 and "CORRUPT" not in r.output, r.output
    # Twice, or from a directory that is not a finished DCP checkpoint: exit 2, one sentence.
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "already exists" in r.output, r.output
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "__0_0.distcp").write_bytes(b"x")
    r = runner.invoke(app, ["checkpoint", "import", str(tmp_path / "half"), "--step", "8",
                            "--config", str(cfg_file)])
    assert r.exit_code == 2 and "no .metadata" in r.output and "Traceback" not in r.output


PEAK = """
import resource, sys, torch, torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from rackscale.checkpoint import parse_config
from rackscale.checkpoint.dcp import TieredStorageWriter
mode, root, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
sd = {"t": torch.full((mib << 18,), 1.5)}
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
cfg = parse_config({"local_dir": root + "/local", "fsync": False, "upload_parallelism": 2,
                    "region": {"name": "r", "kind": "dir", "path": root + "/region"}})
w = FileSystemWriter(root + "/fs", sync_files=False) if mode == "fs" else \\
    TieredStorageWriter(cfg, 1)
dcp.save(sd, storage_writer=w)
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kib(mode: str, root: Path, mib: int) -> tuple[int, int]:
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", PEAK, mode, str(root), str(mib)], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    base, peak = map(int, out.stdout.split())
    return base, peak


def test_peak_rss_of_a_tiered_save_within_1_2x_of_filesystemwriter(tmp_path: Path) -> None:
    mib = 160
    _, fs = peak_kib("fs", tmp_path / "a", mib)
    _, tiered = peak_kib("tiered", tmp_path / "b", mib)
    # Reading a file whole to hash it added the whole state dict again (+160 MiB here).
    assert tiered <= 1.2 * fs, (tiered / 1024, fs / 1024)
