"""dcgm-exporter pages for the tests, in the exporter's text format: its HELP and TYPE lines
(from dcgm-exporter's default counters file), one sample per field and GPU with its labels in
the exporter's order (gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION; err_code and err_msg on the Xid field, as newer versions add). No GPU
is on this machine, so the pages are written here rather than captured from one."""

from __future__ import annotations

import hashlib

FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz).", 1980.0),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C).", 41.0),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W).", 612.5),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered.", 0.0),
    "DCGM_FI_DEV_POWER_VIOLATION": (
        "counter", "Throttling duration due to power constraints (in us).", 0.0),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (
        "counter", "Throttling duration due to thermal constraints (in us).", 0.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (
        "counter", "Total number of double-bit volatile ECC errors.", 0.0),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (
        "counter", "Total number of NVLink flow-control CRC errors.", 0.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed", 0.0),
}
XID_MSG = {0: "", 13: "Graphics Engine Exception", 79: "GPU has fallen off the bus"}


def _labels(host: str, gpu: int) -> str:
    uid = hashlib.sha256(f"{host}/{gpu}".encode()).hexdigest()
    uuid = f"GPU-{uid[:8]}-{uid[8:12]}-{uid[12:16]}-{uid[16:20]}-{uid[20:32]}"
    return (f'gpu="{gpu}",UUID="{uuid}",pci_bus_id="00000009:{gpu + 1:02d}:00.0",'
            f'device="nvidia{gpu}",modelName="NVIDIA GB200",Hostname="{host}",'
            'DCGM_FI_DRIVER_VERSION="570.124.06"')


def page(hosts: dict[str, dict[int, dict[str, float]]]) -> str:
    """hosts: Hostname -> GPU index -> field -> value (fields left out take the healthy
    default)."""
    lines: list[str] = []
    for name, (kind, help_text, default) in FIELDS.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        for host, gpus in hosts.items():
            for gpu, values in gpus.items():
                value = values.get(name, default)
                labels = _labels(host, gpu)
                if name == "DCGM_FI_DEV_XID_ERRORS":
                    code = int(value)
                    labels += f',err_code="{code}",err_msg="{XID_MSG.get(code, "")}"'
                lines.append(f"{name}{{{labels}}} {value:g}")
    return "\n".join(lines) + "\n"
