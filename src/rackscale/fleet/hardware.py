"""Per-SKU hardware specs as data, each with the source it was taken from.

The figures and their sources are listed in docs/figures.md. `verified=False` marks a figure that no
primary source backs (an estimate); every report that uses such a figure should say so.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSku:
    name: str
    bf16_dense_tflops: float
    hbm_gb: float
    hbm_tbps: float
    nvlink_gbps: float  # NVLink bandwidth per GPU, GB/s (both directions, as NVIDIA quotes it)
    power_w: float
    source: str
    verified: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class NicSku:
    name: str
    gbit_s: float  # line rate per port, Gb/s
    source: str
    verified: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PartSku:
    """A CPU, DPU or switch part: only its name and where the name came from matter here."""

    name: str
    kind: str
    source: str


GPUS: dict[str, GpuSku] = {
    s.name: s
    for s in (
        GpuSku(
            name="h100-sxm", bf16_dense_tflops=989, hbm_gb=80, hbm_tbps=3.35, nvlink_gbps=900,
            power_w=700, source="NVIDIA H100 datasheet (secondary), docs/figures.md",
        ),
        GpuSku(
            name="h200-sxm", bf16_dense_tflops=989, hbm_gb=141, hbm_tbps=4.8, nvlink_gbps=900,
            power_w=700, source="NVIDIA H200 datasheet; MLPerf v4.1 system JSON, docs/figures.md",
        ),
        GpuSku(
            name="b200", bf16_dense_tflops=2250, hbm_gb=180, hbm_tbps=8.0, nvlink_gbps=1800,
            power_w=1000, source="DGX B200 user guide (secondary), docs/figures.md",
        ),
        GpuSku(
            name="gb200", bf16_dense_tflops=2500, hbm_gb=186, hbm_tbps=8.0, nvlink_gbps=1800,
            power_w=1200, source="DGX GB200 user guide, docs/figures.md",
        ),
        # The source gives GB300 only as ~15 PFLOPS dense FP4; Blackwell Ultra keeps
        # Blackwell's BF16 tensor rate, so 2.5 PFLOPS BF16 is an estimate, not a datasheet value.
        GpuSku(
            name="gb300", bf16_dense_tflops=2500, hbm_gb=288, hbm_tbps=8.0, nvlink_gbps=1800,
            power_w=1400, source="NVIDIA GB300 reference architecture (secondary); BF16 estimated",
            verified=False,
        ),
        # Rubin: NVIDIA has published NVFP4 figures (35 PFLOPS training), not dense BF16.
        # 4,000 TFLOPS BF16 and 1,800 W are estimates (rack power is 120-230 kW per secondary
        # sources); they are flagged unverified wherever they are printed.
        GpuSku(
            name="rubin", bf16_dense_tflops=4000, hbm_gb=288, hbm_tbps=22.0, nvlink_gbps=3600,
            power_w=1800, source="NVIDIA CES 2026 figures (secondary); BF16 and power estimated",
            verified=False,
        ),
        # The lab's "GPU": one CPU rank of the miniature cluster (`rackscale lab`). Its figures
        # are what the lab states, not a datasheet: GEMM and memory floors for a rank capped at
        # half a CPU core, and an "NVLink" veth shaped with tc to 800 Mbit/s each way.
        GpuSku(
            name="lab-rank", bf16_dense_tflops=0.002, hbm_gb=1, hbm_tbps=0.0005,
            nvlink_gbps=0.2, power_w=0, source="rackscale lab: stated rates of its tc-shaped "
            "links (NVLink veth 800 Mbit/s each way); GEMM and copy figures are floors",
            verified=False,
        ),
    )
}

NICS: dict[str, NicSku] = {
    s.name: s
    for s in (
        NicSku(name="cx7", gbit_s=400, source="NVIDIA ConnectX-7 (H100/H200/GB200 datasheets)"),
        NicSku(name="cx8", gbit_s=800, source="NVIDIA GB300 reference architecture (secondary)"),
        NicSku(name="cx9", gbit_s=1600, source="Vera Rubin NVL72 seed article: CX-9 1.6 Tb/s"),
        NicSku(name="lab-veth", gbit_s=0.2,
               source="rackscale lab: veth shaped by tc to 200 Mbit/s"),
    )
}

PARTS: dict[str, PartSku] = {
    s.name: s
    for s in (
        PartSku(name="vera", kind="cpu", source="Vera Rubin NVL72: 36 Vera CPUs per rack"),
        PartSku(name="grace", kind="cpu", source="GB200 NVL72: 2 Grace CPUs per tray"),
        PartSku(name="x86-host", kind="cpu", source="HGX reference: 2 host CPUs per node"),
        PartSku(name="bf3", kind="dpu", source="GB200 NVL72: 2 BlueField-3 per tray"),
        PartSku(name="bf4", kind="dpu", source="Vera Rubin NVL72: BlueField-4 DPUs"),
        PartSku(name="nvlink5-switch-tray", kind="switch_tray", source="GB200 NVL72: 9 trays"),
        PartSku(name="nvlink6-switch-tray", kind="switch_tray", source="VR NVL72: 9 trays"),
        PartSku(name="nvswitch-gen3", kind="nvswitch", source="HGX H100/H200: 4 NVSwitch chips"),
        PartSku(name="nvswitch-gen4", kind="nvswitch", source="HGX B200: 2 NVSwitch chips"),
        PartSku(name="lab-cpu", kind="cpu", source="rackscale lab: the host CPU"),
        PartSku(name="lab-dpu", kind="dpu", source="rackscale lab: placeholder, no DPU"),
        PartSku(name="lab-bridge", kind="switch_tray",
                source="rackscale lab: the rack's NVLink bridge"),
    )
}
