"""Real probes on this machine through PyTorch: the same probe code the twin runs."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rackscale.certify import PROBES, Groups, Scope  # noqa: E402
from rackscale.certify.torch_backend import TorchBackend, gemm_checksum_ok  # noqa: E402

CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def cpu() -> TorchBackend:
    return TorchBackend("cpu")


def test_gemm_measures_positive_tflops_and_verifies_the_result(cpu: TorchBackend) -> None:
    m = PROBES.create("gemm", cpu).run(Scope(gpus=np.asarray([0]), gemm_n=512))
    assert m.backend == "real" and m.source == "measured"
    assert m.unit == "TFLOPS" and m.values[0] > 0
    assert bool(m.extra["checksum_ok"][0])


def test_checksum_catches_a_corrupted_element() -> None:
    gen = torch.Generator().manual_seed(0)
    a, b = torch.rand(256, 256, generator=gen), torch.rand(256, 256, generator=gen)
    c = a @ b
    assert gemm_checksum_ok(a, b, c, rtol=1e-4)
    c[17, 42] += 0.05 * c[17, 42]  # one wrong element, as silent data corruption gives
    assert not gemm_checksum_ok(a, b, c, rtol=1e-4)


def test_hbm_copy_bandwidth_is_positive(cpu: TorchBackend) -> None:
    m = PROBES.create("hbm", cpu).run(Scope(gpus=np.asarray([0]), copy_bytes=64 << 20))
    assert m.unit == "TB/s" and 0 < m.values[0] < 10


def test_two_process_gloo_allreduce_larger_message_is_not_slower(cpu: TorchBackend) -> None:
    probe = PROBES.create("scaleout_allreduce", cpu)
    assert probe.detect()
    small = probe.run(Scope(groups=Groups.of([[0, 1]]), size_bytes=32 << 10))
    large = probe.run(Scope(groups=Groups.of([[0, 1]]), size_bytes=8 << 20))
    assert small.values[0] > 0 and large.values[0] > 0
    assert large.values[0] >= small.values[0]
    assert bool(small.extra["result_ok"][0]) and bool(large.extra["result_ok"][0])
    # nccl-tests: busbw = algbw * 2(n-1)/n, which is algbw itself for two ranks
    assert large.values[0] == pytest.approx(large.extra["algbw"][0])


def test_gpu_only_probes_say_why_they_cannot_run_on_cpu(cpu: TorchBackend) -> None:
    assert not PROBES.create("nvlink_allreduce", cpu).detect()
    assert "CUDA" in (cpu.why_not("nvlink_allreduce") or "")
    assert "NVML" in (cpu.why_not("thermal") or "")
    assert "NMX" in (cpu.why_not("nvlink_plane") or "")


@pytest.mark.skipif(not CUDA, reason="no CUDA GPU on this machine")
def test_cuda_gemm_and_hbm() -> None:
    gpu = TorchBackend("cuda")
    m = PROBES.create("gemm", gpu).run(Scope(gpus=np.asarray([0]), gemm_n=4096))
    assert m.values[0] > 0 and bool(m.extra["checksum_ok"][0])
    h = PROBES.create("hbm", gpu).run(Scope(gpus=np.asarray([0]), copy_bytes=1 << 30))
    assert h.values[0] > 0


@pytest.mark.skipif(not CUDA or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_cuda_nccl_allreduce_nvlink_on_and_off() -> None:
    gpu = TorchBackend("cuda")
    scope = Scope(groups=Groups.of([[0, 1]]), size_bytes=64 << 20)
    on = PROBES.create("nvlink_allreduce", gpu).run(scope)
    off = PROBES.create("scaleout_allreduce", gpu).run(scope)
    assert on.values[0] > 0 and off.values[0] > 0
