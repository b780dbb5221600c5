"""The fleet's hardware model: every GPU's SKU and link rates, and what an all-reduce over a
group of GPUs can reach on those links.

One model serves three users, so they cannot drift apart:
- the digital twin answers an all-reduce with it, on its faulted per-GPU rates;
- the certification ladder expects of a group what this model predicts from the rates it
  learned on healthy groups (or from the spec), whatever backend measured the group;
- runners on real hardware build it with the rates their links are stated or shaped to
  (`with_rates`) and ask `expected_busbw` of any group of GPU ids.

Rates are nominal link rates in GB/s, one direction, per GPU: NVLink is the SKU's per-GPU
NVLink bandwidth (NVIDIA quotes both directions, so half of it); scale-out is the line rate
of the GPU's NIC (one NIC per GPU). How a collective uses them (NCCL's algorithms):
- a ring runs at the pace of its slowest link: over NVLink inside one NVLink domain, the
  slowest member's NVLink; with NVLink off, the slowest member's scale-out link;
- NVLink on across domains is hierarchical: a reduce-scatter inside each domain, then each
  GPU carries 1/D of the data over its NIC (D = GPUs per domain), so
  busbw = 1 / (1/nv + 1/(D x so)) with nv and so the group's slowest NVLink and NIC rates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from rackscale.fleet.hardware import GPUS, NICS
from rackscale.fleet.topology import Topology

Fabric = Literal["nvlink", "scaleout"]


@dataclass(frozen=True, slots=True)
class LinkClass:
    """Links that should measure alike: one SKU at one nominal rate. Learned baselines of
    collectives are kept per class (a GPU SKU for NVLink, a NIC SKU for scale-out)."""

    fabric: Fabric
    sku: str
    gbps: float

    def __str__(self) -> str:
        return f"{self.fabric}:{self.sku}@{self.gbps:g}GB/s"


def allreduce_busbw(offsets: np.ndarray, domain: np.ndarray, nvlink_gbps: np.ndarray,
                    scaleout_gbps: np.ndarray, *, nvlink: bool) -> np.ndarray:
    """Bus bandwidth (GB/s) of one all-reduce per group. Group i is members
    `offsets[i]:offsets[i+1]` of the member arrays (NVLink domain number and the two link
    rates of each member, GPU numbers ascending inside a group). NaN in, NaN out."""
    starts = offsets[:-1]
    if len(starts) == 0:
        return np.zeros(0)
    sizes = np.diff(offsets)
    so = np.minimum.reduceat(scaleout_gbps, starts)
    if not nvlink:
        return so
    new_dom = np.ones(len(domain), bool)
    new_dom[1:] = domain[1:] != domain[:-1]
    new_dom[starts] = True
    n_dom = np.add.reduceat(new_dom.astype(np.int64), starts)
    nv = np.minimum.reduceat(nvlink_gbps, starts)
    with np.errstate(divide="ignore", invalid="ignore"):
        hier = 1.0 / (1.0 / nv + 1.0 / (sizes / n_dom * so))
    return np.where(n_dom == 1, nv, hier)


class HardwareModel:
    """Per-GPU SKU and nominal link rates of a fleet. `HardwareModel(topo)` takes the rates
    from the SKU specs; `with_rates` states others (a lab's shaped links)."""

    def __init__(self, topo: Topology, *, nvlink_gbps: np.ndarray | float | None = None,
                 scaleout_gbps: np.ndarray | float | None = None) -> None:
        self.topo = topo
        n = len(topo.gpu_ids)
        # The one SKU index of the fleet: sorted names, and each GPU's position in them.
        self.sku_names: list[str] = sorted(set(topo.gpu_sku))
        pos = {s: i for i, s in enumerate(self.sku_names)}
        self.gpu_sku = np.fromiter((pos[s] for s in topo.gpu_sku), dtype=np.int16, count=n)
        rack_nic = [r.template.nic for r in topo.racks]
        self.nic_names: list[str] = sorted(set(rack_nic))
        nic_pos = np.asarray([self.nic_names.index(s) for s in rack_nic], dtype=np.int16)
        self.gpu_nic_sku = nic_pos[topo.gpu_rack] if n else np.zeros(0, np.int16)
        spec_nv = self.gpu_spec("nvlink_gbps") / 2
        spec_so = np.asarray([NICS[s].gbit_s / 8 for s in self.nic_names])[self.gpu_nic_sku]
        self.nvlink_gbps = _rates(spec_nv if nvlink_gbps is None else nvlink_gbps, n, "nvlink")
        self.scaleout_gbps = _rates(spec_so if scaleout_gbps is None else scaleout_gbps, n,
                                    "scaleout")
        self._classes = {f: self._class_index(f) for f in ("nvlink", "scaleout")}

    def with_rates(self, *, nvlink_gbps: np.ndarray | float | None = None,
                   scaleout_gbps: np.ndarray | float | None = None) -> HardwareModel:
        """The same fleet with stated link rates (GB/s one direction, per GPU or one for
        all); a rate left out keeps this model's."""
        return HardwareModel(
            self.topo,
            nvlink_gbps=self.nvlink_gbps if nvlink_gbps is None else nvlink_gbps,
            scaleout_gbps=self.scaleout_gbps if scaleout_gbps is None else scaleout_gbps)

    # ------------------------------------------------------------------ SKUs
    def gpu_spec(self, attr: str, gpus: np.ndarray | None = None) -> np.ndarray:
        """A GpuSku figure (e.g. "bf16_dense_tflops") of every GPU, or of `gpus`."""
        table = np.asarray([getattr(GPUS[s], attr) for s in self.sku_names], dtype=float)
        idx = self.gpu_sku if gpus is None else self.gpu_sku[gpus]
        return table[idx]

    def rates(self, fabric: Fabric) -> np.ndarray:
        return self.nvlink_gbps if fabric == "nvlink" else self.scaleout_gbps

    def _class_index(self, fabric: Fabric) -> tuple[list[LinkClass], np.ndarray]:
        sku, names = ((self.gpu_sku, self.sku_names) if fabric == "nvlink"
                      else (self.gpu_nic_sku, self.nic_names))
        rate = self.rates(fabric)
        # Each GPU's (sku, rate) as one integer that sorts as the pair does, then the distinct
        # ones: a Python loop over 128k GPUs took 0.16 s of every command building the model.
        rate_values, rate_at = np.unique(rate, return_inverse=True)
        code = sku.astype(np.int64) * len(rate_values) + rate_at.reshape(-1)
        uniq, inv = np.unique(code, return_inverse=True)
        keys = [(int(c) // len(rate_values), float(rate_values[c % len(rate_values)]))
                for c in uniq.tolist()]
        idx = inv.reshape(-1).astype(np.int32)
        return [LinkClass(fabric, names[s], r) for s, r in keys], idx

    def classes(self, fabric: Fabric) -> list[LinkClass]:
        return self._classes[fabric][0]

    def gpu_class(self, fabric: Fabric) -> np.ndarray:
        """Each GPU's link class number on `fabric` (an index into `classes(fabric)`)."""
        return self._classes[fabric][1]

    # ------------------------------------------------------------------ collectives
    def busbw(self, flat: np.ndarray, offsets: np.ndarray, *, nvlink: bool,
              nvlink_gbps: np.ndarray | None = None,
              scaleout_gbps: np.ndarray | None = None) -> np.ndarray:
        """Bus bandwidth (GB/s) of one all-reduce per group of GPU numbers (group i is
        `flat[offsets[i]:offsets[i+1]]`, ascending), on this model's rates or on per-GPU
        rates given (learned, or measured)."""
        nv = self.nvlink_gbps if nvlink_gbps is None else nvlink_gbps
        so = self.scaleout_gbps if scaleout_gbps is None else scaleout_gbps
        return allreduce_busbw(offsets, self.topo.gpu_domain[flat], nv[flat], so[flat],
                               nvlink=nvlink)

    def gpus(self, ids: Sequence[str]) -> np.ndarray:
        return np.sort(np.asarray([self.topo.gpu_number(i) for i in ids], dtype=np.int64))

    def expected_busbw(self, gpu_ids: Sequence[str], *, nvlink: bool) -> float:
        """Bus bandwidth (GB/s) one all-reduce over these GPUs reaches at this model's link
        rates: what a runner should expect of the group before any efficiency loss."""
        g = self.gpus(gpu_ids)
        if len(g) < 2:
            raise ValueError("an all-reduce needs at least 2 GPUs")
        return float(self.busbw(g, np.asarray([0, len(g)]), nvlink=nvlink)[0])


def _rates(value: np.ndarray | float, n: int, what: str) -> np.ndarray:
    arr = np.broadcast_to(np.asarray(value, dtype=float), (n,)).copy() if np.ndim(value) == 0 \
        else np.asarray(value, dtype=float)
    if arr.shape != (n,):
        raise ValueError(f"{what} rates: need one per GPU ({n}), got shape {arr.shape}")
    if n and not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"{what} rates must be finite and > 0 GB/s")
    return arr
