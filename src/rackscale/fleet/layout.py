"""How a rack template lays out one rack's parts: the order, kinds and parents of its
components, and where its GPUs, NICs, NVLink domains and switches sit among them.

A fleet has few distinct layouts (one per template and tray count) and many racks, so the
topology computes a layout once and stamps it out per rack: the per-rack work is the ids
(strings) and a few array additions, never a Python loop over the rack's parts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rackscale.fleet.kinds import CDU, CPU, DPU, GPU, NIC, NODE, NVSWITCH, POWER_SHELF, SWITCH_TRAY
from rackscale.fleet.templates import RackTemplate

Layout = list[tuple[str, str, int, str | None]]  # (id suffix, kind, parent position, sku)


def template_layout(t: RackTemplate, trays: int) -> Layout:
    """(suffix, kind, parent position or -1 for the rack, sku) of one rack's parts, in order."""
    out: Layout = []
    prefix = t.tray_prefix()
    tray_kind = t.tray_kind
    for c in range(1, trays + 1):
        tray = f"{prefix}{c:02d}"
        tpos = len(out)
        out.append((tray, tray_kind, -1, t.name))
        out.extend((f"{tray}/gpu{k}", GPU, tpos, t.gpu) for k in range(t.gpus_per_tray))
        out.extend((f"{tray}/cpu{k}", CPU, tpos, t.cpu) for k in range(t.cpus_per_tray))
        out.extend((f"{tray}/nic{k}", NIC, tpos, t.nic) for k in range(t.nics_per_tray))
        out.extend((f"{tray}/dpu{k}", DPU, tpos, t.dpu) for k in range(t.dpus_per_tray))
        if t.switch_kind == NVSWITCH:
            out.extend((f"{tray}/nvsw{k}", NVSWITCH, tpos, t.switch) for k in range(t.switches))
    if t.switch_kind == SWITCH_TRAY:
        out.extend((f"s{k:02d}", SWITCH_TRAY, -1, t.switch) for k in range(1, t.switches + 1))
    out.append(("cdu", CDU, -1, None))
    out.extend((f"ps{k}", POWER_SHELF, -1, None) for k in range(1, t.power_shelves + 1))
    return out


@dataclass(frozen=True, slots=True)
class RackLayout:
    """One template's rack at one tray count, as columns relative to the rack. Positions are
    offsets from the rack's first part (the component after the rack itself); a parent of -1
    is the rack, which sits just before that first part."""

    suffixes: list[str]  # the part's id below the rack: "c07/gpu2"
    kinds: list[str]
    parents: np.ndarray  # parent position, -1 for the rack
    skus: list[str | None]
    # The NVLink domain of an NVL72 rack is the rack; its switch trays' suffixes.
    rack_switches: tuple[str, ...]
    # HGX: each node is a domain: (node suffix, its NVSwitch suffixes), in order.
    node_domains: tuple[tuple[str, tuple[str, ...]], ...]
    gpu_pos: np.ndarray  # the position of every GPU
    gpu_tray: np.ndarray  # the position of its tray or node
    gpu_slot: np.ndarray  # k in gpuK (also the rail of nicK)
    gpu_nic: np.ndarray  # the position of its NIC
    gpu_node: np.ndarray  # its node's number among node_domains (0 for NVL72)

    @classmethod
    def of(cls, t: RackTemplate, trays: int) -> RackLayout:
        parts = template_layout(t, trays)
        kinds = [k for _, k, _, _ in parts]
        gpus = [(pos, parent, int(s.rsplit("gpu", 1)[1]))
                for pos, (s, k, parent, _) in enumerate(parts) if k == GPU]
        node_pos = [pos for pos, k in enumerate(kinds) if k == NODE]
        nodes = tuple(
            (parts[pos][0], tuple(s for s, k, p, _ in parts if k == NVSWITCH and p == pos))
            for pos in node_pos)
        node_no = {pos: n for n, pos in enumerate(node_pos)}
        pos_arr = np.asarray([g[0] for g in gpus], dtype=np.int64)
        tray_arr = np.asarray([g[1] for g in gpus], dtype=np.int64)
        return cls(
            suffixes=[s for s, _, _, _ in parts], kinds=kinds,
            parents=np.asarray([p for _, _, p, _ in parts], dtype=np.int64),
            skus=[sku for _, _, _, sku in parts],
            rack_switches=tuple(s for s, k, _, _ in parts if k == SWITCH_TRAY),
            node_domains=nodes, gpu_pos=pos_arr, gpu_tray=tray_arr,
            gpu_slot=np.asarray([g[2] for g in gpus], dtype=np.int64),
            # NICs follow the GPUs and CPUs of their tray: nicK sits at a fixed offset.
            gpu_nic=pos_arr + t.gpus_per_tray + t.cpus_per_tray,
            gpu_node=np.asarray([node_no.get(int(p), 0) for p in tray_arr], dtype=np.int64),
        )
