"""The CPU GEMM probe times the faster BLAS here (torch's or numpy's, measured in the run) and
verifies the result of every engine it ran."""

from __future__ import annotations

import numpy as np
import pytest

from rackscale.certify import PROBES, Scope

pytest.importorskip("torch")
from rackscale.certify.torch_backend import TorchBackend


@pytest.mark.parametrize("engine", ["auto", "torch", "numpy"])
def test_each_engine_gives_a_verified_figure(engine: str) -> None:
    backend = TorchBackend("cpu", gemm_engine=engine)
    m = PROBES.create("gemm", backend).run(Scope(gpus=np.asarray([0, 1]), gemm_n=256))
    assert np.all(m.values > 0) and bool(np.all(m.extra["checksum_ok"]))
    assert backend.last_engine in (("torch", "numpy") if engine == "auto" else (engine,))


def test_auto_reports_the_faster_engine_of_its_own_timings() -> None:
    backend = TorchBackend("cpu")
    import torch
    a, b = torch.rand(192, 192), torch.rand(192, 192)
    c, seconds, ok = backend._cpu_gemm_best(a, b, torch.empty(192, 192), reps=3)
    assert ok and seconds > 0
    assert torch.allclose(c, a @ b, rtol=1e-4, atol=1e-3)  # the winner's product is returned


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, torch, numpy"):
        TorchBackend("cpu", gemm_engine="mkl")
