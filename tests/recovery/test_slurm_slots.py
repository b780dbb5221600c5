"""The Slurm runner's slot rules without a cluster: a node name back to its tray, a node's
GPUs from its Gres, and a task killed by a signal read as a signal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rackscale.fleet import slurm_node_name
from rackscale.recovery.slurm import SlurmRankProcess, gpu_count, tray_of_node

part = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)


@given(region=st.lists(part, min_size=1, max_size=3).map("-".join), rack=part, tray=part)
def test_a_node_named_after_its_tray_gives_the_tray_back(region: str, rack: str,
                                                        tray: str) -> None:
    tray_id = f"{region}/{rack}/{tray}"
    assert tray_of_node(slurm_node_name(tray_id)) == tray_id


def test_other_node_names_get_a_slurm_tray_and_gres_counts_gpus() -> None:
    assert tray_of_node("gpu01") == "slurm/gpu01/c01"
    assert gpu_count({"Gres": "gpu:h200:8(S:0-1)"}) == 8
    assert gpu_count({"Gres": "gpu:2,gpu:a100:2"}) == 4
    assert gpu_count({"Gres": "(null)"}) == 1  # a CPU node runs one rank


def test_srun_exit_128_plus_n_reads_as_signal_n(tmp_path: Path) -> None:
    """srun exits 128 + N for a task killed by signal N; the detectors expect -N."""
    for code, seen in ((137, -9), (1, 1), (0, 0)):
        p = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
        p.wait(60)
        assert SlurmRankProcess(p, tmp_path / "log", "x", {}).poll() == seen
