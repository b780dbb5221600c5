"""The one place that says how a collective is run: which torch.distributed backend, and
which NCCL variables turn NVLink off.

NVLink off means every byte of a test crosses the scale-out NIC, as a multi-rack ring does:
  NCCL_P2P_DISABLE=1   no peer-to-peer transport between GPUs of a node (NVLink or PCIe)
  NCCL_SHM_DISABLE=1   no shared-memory transport through host memory either
  NCCL_NVLS_ENABLE=0   no NVLink SHARP (in-switch reductions of the NVSwitches)
  NCCL_MNNVL_ENABLE=0  no multi-node NVLink (NVL72: trays of one rack talk over NVLink)
NVLink on removes those variables, so a test inherits none of them from the caller's shell.
NCCL reads its variables once per process: a rank that runs both kinds of test runs each
kind in its own process (the agent's per-environment children).

This module imports nothing (the rank agent, run by path, imports it as a sibling).
"""

from __future__ import annotations

NVLINK_OFF_ENV: dict[str, str] = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1",
                                  "NCCL_NVLS_ENABLE": "0", "NCCL_MNNVL_ENABLE": "0"}
DIST_BACKENDS = ("nccl", "gloo")


def dist_backend(cuda_available: bool) -> str:
    """NCCL on CUDA GPUs, gloo on CPU ranks."""
    return "nccl" if cuda_available else "gloo"


def collective_env(nvlink: bool) -> dict[str, str | None]:
    """Variables a collective's process needs, NVLink on or off; None = must be unset."""
    if nvlink:
        return dict.fromkeys(NVLINK_OFF_ENV)
    return dict(NVLINK_OFF_ENV)


def apply_env(base: dict[str, str], overrides: dict[str, str | None]) -> dict[str, str]:
    """`base` with `overrides` applied: a None value removes the variable."""
    out = dict(base)
    for k, v in overrides.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out
