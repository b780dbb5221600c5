"""GPU ranks through the runners: the collective backend (NCCL on CUDA, gloo otherwise) and the
NVLink on/off NCCL variables, chosen in one place (runners.fabric_env) and applied by real
agent processes. The CUDA tests run where a GPU is lent and skip cleanly elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rackscale.certify.runners import LocalRunner, loopback_placement
from rackscale.certify.runners.agents import AGENT
from rackscale.certify.runners.fabric_env import (
    NVLINK_OFF_ENV,
    apply_env,
    collective_env,
    dist_backend,
)
from rackscale.certify.runners.local import CollectivePlanner

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0
OFF = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}


def test_backend_and_env_per_nvlink_mode() -> None:
    assert dist_backend(True) == "nccl" and dist_backend(False) == "gloo"
    off, on = collective_env(False), collective_env(True)
    assert OFF.items() <= off.items() and off["NCCL_MNNVL_ENABLE"] == "0"
    assert set(on) == set(off) and all(v is None for v in on.values())
    shell = {"PATH": "/bin", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert apply_env(shell, on) == {"PATH": "/bin"}  # NVLink on: nothing inherited turns it off
    assert apply_env(shell, off) == {"PATH": "/bin"} | NVLINK_OFF_ENV


def test_the_torch_backend_workers_get_the_same_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from rackscale.certify import torch_backend
    assert torch_backend.NVLINK_OFF_ENV is NVLINK_OFF_ENV  # one table, not a copy


def test_the_planner_sends_each_test_its_nvlink_env() -> None:
    gpus = ["f/r01/c01/gpu0", "f/r01/c01/gpu1"]
    planner = CollectivePlanner(loopback_placement(gpus), dict.fromkeys(gpus, "f/r01"),
                                iters=1, warmup=0, timeout_s=5)
    off = planner.commands(gpus, 1 << 16, nvlink=False)
    on = planner.commands(gpus, 1 << 16, nvlink=True)
    for g in gpus:
        assert off[g]["env"] == collective_env(False)
        assert on[g]["env"] == collective_env(True)


def _agent_session(cmds: list[dict[str, object]], env: dict[str, str]) -> list[dict]:
    p = subprocess.run([sys.executable, AGENT], input="".join(json.dumps(c) + "\n" for c in
                       [*cmds, {"op": "exit"}]), capture_output=True, text=True, timeout=300,
                       env=os.environ | env | {"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-800:]
    return [json.loads(x) for x in p.stdout.splitlines()]


def test_an_agent_runs_a_command_in_a_child_with_its_env() -> None:
    """The agent's per-environment child, as an NCCL rank uses it (asked of a gloo rank with
    `isolate`): the child sees exactly the test's NVLink variables, the agent keeps its own."""
    ready, here, off, off_again, on = _agent_session([
        {"op": "env"},
        {"op": "env", "env": collective_env(False), "isolate": True},
        {"op": "env", "env": collective_env(False), "isolate": True},
        {"op": "env", "env": collective_env(True), "isolate": True},
    ], {"NCCL_SHM_DISABLE": "1", "RACKSCALE_LOCAL_ID": "3"})
    assert ready["ready"] and ready["backend"] == dist_backend(CUDA)
    assert here["pid"] == ready["pid"] and here["nccl"]["NCCL_SHM_DISABLE"] == "1"
    assert here["device"] == (f"cuda:{3 % GPUS}" if CUDA else "cpu")
    assert off["pid"] != ready["pid"] and off["nccl"] == NVLINK_OFF_ENV
    assert off_again["pid"] == off["pid"]  # one child per environment, kept
    assert on["pid"] not in (ready["pid"], off["pid"])
    assert on["nccl"] == dict.fromkeys(NVLINK_OFF_ENV)  # unset, though the shell set one


def test_a_gloo_rank_runs_the_test_itself_when_no_isolation_is_asked() -> None:
    if CUDA:
        pytest.skip("on a CUDA host every NCCL test with an env runs in a child")
    ready, here, nvml = _agent_session([{"op": "env", "env": collective_env(False)},
                                        {"op": "nvml"}], {})
    assert here["pid"] == ready["pid"] and here["backend"] == "gloo"
    assert not nvml["ok"] and "NVML" in nvml["error"]  # a CPU rank says why, never hangs


def test_local_runner_collective_with_nvlink_off_env() -> None:
    gpus = ["f/r01/c01/gpu0", "f/r01/c01/gpu1"]
    runner = LocalRunner(loopback_placement(gpus), dict.fromkeys(gpus, "f/r01"),
                         timeout_s=60)
    try:
        res = runner.collectives([gpus], 1 << 16, nvlink=False)
        assert res[0].ok, res[0].error
        assert res[0].values["result_ok"] and res[0].values["seconds"] > 0
        envs = runner.per_rank({"op": "env"}, gpus)
        assert [r.values["backend"] for r in envs] == [dist_backend(CUDA)] * 2
    finally:
        runner.close()


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_ranks_gemm_and_copy_on_their_gpus() -> None:
    gpus = [f"f/r01/c01/gpu{i}" for i in range(min(GPUS, 2))]
    runner = LocalRunner(loopback_placement(gpus), dict.fromkeys(gpus, "f/r01"),
                         timeout_s=120)
    try:
        gemm = runner.per_rank({"op": "gemm", "n": 8192, "min_s": 1.0}, gpus)
        copy = runner.per_rank({"op": "copy", "nbytes": 1 << 30}, gpus)
        envs = runner.per_rank({"op": "env"}, gpus)
    finally:
        runner.close()
    for g, c, e in zip(gemm, copy, envs, strict=True):
        assert g.ok and c.ok, (g.error, c.error)
        tflops = 2 * 8192**3 / g.values["seconds"] / 1e12
        assert g.values["checksum_ok"] and tflops > 50  # bf16 on a data-centre GPU
        assert 2 * (1 << 30) / c.values["seconds"] / 1e12 > 0.5  # HBM, TB/s
        assert e.values["backend"] == "nccl"
    assert [e.values["device"] for e in envs] == [f"cuda:{i}" for i in range(len(gpus))]


@pytest.mark.skipif(GPUS < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("nvlink", [True, False])
def test_nccl_all_reduce_through_the_runner(nvlink: bool) -> None:
    gpus = ["f/r01/c01/gpu0", "f/r01/c01/gpu1"]
    runner = LocalRunner(loopback_placement(gpus), dict.fromkeys(gpus, "f/r01"),
                         timeout_s=120)
    try:
        res = runner.collectives([gpus], 64 << 20, nvlink=nvlink)
    finally:
        runner.close()
    assert res[0].ok, res[0].error
    assert res[0].values["result_ok"]


def test_slurm_ranks_ask_for_a_gpu_on_gpu_nodes() -> None:
    from rackscale.certify.runners.slurm import SlurmRunner, gpu_gres
    # recorded `scontrol show node -o` fields: a GPU node, a CPU node, an MPS-only node
    assert gpu_gres({"NodeName": "n1", "Gres": "gpu:h200:8(S:0-1)"})
    assert gpu_gres({"NodeName": "n1", "Gres": "gpu:4,mps:400"})
    assert not gpu_gres({"NodeName": "n2", "Gres": "(null)"})
    assert not gpu_gres({"NodeName": "n3", "Gres": "mps:100"}) and not gpu_gres({})
    gpus = ["f/r01/c01/gpu0"]
    kw = {"node_of": {gpus[0]: "f-r01-c01"}, "env": {}}
    with_gpu = SlurmRunner(loopback_placement(gpus), {gpus[0]: "f/r01"}, gres="gpu:1", **kw)
    without = SlurmRunner(loopback_placement(gpus), {gpus[0]: "f/r01"}, **kw)
    assert "--gres=gpu:1" in with_gpu._argv(gpus[0])
    assert not any(a.startswith("--gres") for a in without._argv(gpus[0]))


def test_gpu_ranks_telemetry_is_nvmls_reading() -> None:
    """RunnerBackend on GPU ranks takes clock and temperature from the agents' NVML reading
    (replies recorded in the agent's format; the CPU-rank path runs for real in the lab
    tests, the NVML path in the CUDA test below)."""
    import numpy as np

    from rackscale.certify.runners import Result, RunnerBackend
    from rackscale.cli.fleet import spec_of
    from rackscale.fleet import Topology
    lab = Path(__file__).parents[2] / "src/rackscale/lab/data/lab.yaml"
    topo = Topology.build(spec_of(str(lab)))
    rack = topo.racks[0]
    ids = topo.gpu_ids[rack.gpu_first:rack.gpu_end]

    class Recorded:
        name, concurrency = "recorded", 1
        placement = loopback_placement(topo.gpu_ids)

        def per_rank(self, op: dict, gpus: list[str]) -> list[Result]:
            assert op == {"op": "cpu"} and gpus == ids
            return [Result(True, {"cpu_quota": None, "gpu": {"temp_c": 60 + i,
                                                            "clock_frac": 0.5 + i / 10,
                                                            "power_w": 700.0}})
                    for i in range(len(gpus))]

    t = RunnerBackend(topo, Recorded()).telemetry(np.asarray([0]), 0.0)  # type: ignore[arg-type]
    assert list(t.extra["gpu_temp_c"]) == [60 + i for i in range(len(ids))]
    assert np.allclose(t.extra["gpu_clock_frac"], [0.5 + i / 10 for i in range(len(ids))])


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
def test_gpu_rank_reports_nvml_or_says_why() -> None:
    ready, cpu = _agent_session([{"op": "cpu"}], {})
    assert ready["backend"] == "nccl"
    assert "gpu" in cpu or "gpu_error" in cpu
    if "gpu" in cpu:
        assert 0 < cpu["gpu"]["clock_frac"] <= 1.0 and cpu["gpu"]["temp_c"] > 0
