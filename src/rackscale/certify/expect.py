"""What a group of GPUs should reach in an all-reduce: the fleet's hardware model
(`fleet.HardwareModel`) on link rates learned from the fleet's own groups.

The expectation never comes from one member (a first GPU's SKU) or from the backend: it is
the model's prediction for exactly the group's members and links, so a ring that mixes SKUs
or NIC speeds is expected to run at its slowest link, as it does, and the same code judges
the twin and real hardware.

Learning (top-level tests of a stage): each group's measured bus bandwidth divided by what
the model predicts at nominal rates is its *efficiency*. Groups are keyed by the link class
that bounds them (a GPU SKU's NVLink, a NIC SKU's line rate: `fleet.LinkClass`); per class
the fleet median/MAD of efficiencies is the baseline, robust to up to half the groups being
faulty. A class with too few groups (or that bounds none: the faster side of every mixed
ring) takes the efficiency pooled over all the probe's groups, and without enough of those,
the spec floor. Expectation: each GPU's learned rate is its nominal rate times its class's
efficiency; the model on those rates gives any group's reference (a bisected half, a pair
with a reference GPU, a hierarchical multi-domain group).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from rackscale.certify.verdict import MAD_TO_SIGMA, Baseline
from rackscale.fleet import Fabric, HardwareModel

# Spec floors of all-reduce bus bandwidth as a share of nominal link rate, used where too few
# groups exist to learn from: 80% of one-direction NVLink, 90% of NIC line rate.
SPEC_EFFICIENCY: dict[Fabric, float] = {"nvlink": 0.8, "scaleout": 0.9}
MIN_SAMPLES = 5  # groups needed for a median/MAD baseline
DEFAULT_SIGMA = 0.01  # relative spread assumed where too few groups exist to measure it
Basis = Literal["class", "pooled", "spec", "few", "none"]


@dataclass(slots=True)
class LearnedLinks:
    """Per link class of one fabric: learned efficiency (measured / nominal), its relative
    sigma, and what it rests on."""

    fabric: Fabric
    eff: np.ndarray
    sigma: np.ndarray
    basis: list[Basis]
    samples: np.ndarray  # groups behind each class's figure

    def source(self, classes: np.ndarray) -> str:
        parts = set()
        for c in np.unique(classes):
            b, n = self.basis[int(c)], int(self.samples[int(c)])
            parts.add({"class": f"fleet median/MAD of {n}", "pooled": f"fleet median/MAD of "
                       f"{n} (pooled over link classes)", "spec": "spec",
                       "few": f"median of {n} (too few for MAD)",
                       "none": "no healthy group to learn from"}[b])
        return "; ".join(sorted(parts))


def _stats(eff: np.ndarray) -> tuple[float, float]:
    med = float(np.median(eff))
    mad = float(np.median(np.abs(eff - med)))
    return med, (max(MAD_TO_SIGMA * mad / med, 1e-4) if med > 0 else DEFAULT_SIGMA)


def bottleneck(model: HardwareModel, fabric: Fabric, flat: np.ndarray,
               offsets: np.ndarray) -> np.ndarray:
    """Link class of each group's slowest member at nominal rates (the link a ring waits on)."""
    rate = model.rates(fabric)[flat]
    starts = offsets[:-1]
    slowest = np.minimum.reduceat(rate, starts)
    at_min = rate <= np.repeat(slowest, np.diff(offsets))
    pos = np.minimum.reduceat(np.where(at_min, np.arange(len(flat)), len(flat)), starts)
    classes: np.ndarray = model.gpu_class(fabric)[flat[pos]]
    return classes


def learn(model: HardwareModel, fabric: Fabric, flat: np.ndarray, offsets: np.ndarray,
          medians: np.ndarray, *, spec_eff: float | None) -> LearnedLinks:
    """Efficiencies per link class from these groups' measured medians (see module doc).
    Nothing is kept from an earlier stage: trays of one domain share its switch trays, so a
    class learned from them can carry a domain-wide fault that the domain test must see."""
    nominal = model.busbw(flat, offsets, nvlink=fabric == "nvlink")
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = medians / nominal
    cls = bottleneck(model, fabric, flat, offsets)
    n_cls = len(model.classes(fabric))
    ok = np.isfinite(eff)
    pooled_basis: Basis
    if ok.sum() >= MIN_SAMPLES:
        pooled, pooled_sig, pooled_basis = *_stats(eff[ok]), "pooled"
    elif spec_eff is not None:
        pooled, pooled_sig, pooled_basis = spec_eff, DEFAULT_SIGMA, "spec"
    elif ok.any():
        pooled, pooled_sig, pooled_basis = float(np.median(eff[ok])), DEFAULT_SIGMA, "few"
    else:
        pooled, pooled_sig, pooled_basis = np.nan, DEFAULT_SIGMA, "none"
    out = LearnedLinks(fabric=fabric, eff=np.full(n_cls, pooled),
                       sigma=np.full(n_cls, pooled_sig), basis=[pooled_basis] * n_cls,
                       samples=np.full(n_cls, int(ok.sum())))
    for c in range(n_cls):
        mine = eff[(cls == c) & ok]
        if len(mine) >= MIN_SAMPLES:
            out.eff[c], out.sigma[c] = _stats(mine)
            out.basis[c], out.samples[c] = "class", len(mine)
    return out


def learned_rates(model: HardwareModel, links: LearnedLinks) -> tuple[np.ndarray, np.ndarray]:
    """(rate GB/s, relative sigma) of every GPU's link on the learned fabric."""
    c = model.gpu_class(links.fabric)
    return model.rates(links.fabric) * links.eff[c], links.sigma[c]


def expected(model: HardwareModel, learned: dict[Fabric, LearnedLinks], flat: np.ndarray,
             offsets: np.ndarray, *, nvlink: bool,
             spec_eff: dict[Fabric, float]) -> Baseline:
    """Reference bus bandwidth of each group (the model on learned rates) and its relative
    sigma (the widest of its members' classes: a mixed ring is no steadier than its noisiest
    link). A fabric not learned yet stands at its spec floor."""
    starts = offsets[:-1]
    fabrics: list[Fabric] = ["scaleout"]
    if nvlink:
        dom = model.topo.gpu_domain[flat]
        spans = np.maximum.reduceat(dom, starts) != np.minimum.reduceat(dom, starts) \
            if len(flat) else np.zeros(0, bool)
        # Inside one NVLink domain the scale-out links carry nothing: only NVLink counts.
        fabrics = ["nvlink", "scaleout"] if spans.any() else ["nvlink"]
    rates: dict[Fabric, np.ndarray] = {}
    sigma = np.zeros(len(flat))
    sources = []
    for fabric in fabrics:
        links = learned.get(fabric)
        if links is None:
            rates[fabric] = model.rates(fabric) * spec_eff[fabric]
            sigma = np.maximum(sigma, DEFAULT_SIGMA)
            sources.append(f"{fabric} spec floor")
            continue
        r, s = learned_rates(model, links)
        rates[fabric] = r
        sigma = np.maximum(sigma, s[flat])
        sources.append(links.source(model.gpu_class(fabric)[flat]))
    ref = model.busbw(flat, offsets, nvlink=nvlink, nvlink_gbps=rates.get("nvlink"),
                      scaleout_gbps=rates.get("scaleout"))
    sig = np.maximum.reduceat(sigma, starts) if len(flat) else np.zeros(0)
    return Baseline(ref, sig, "; ".join(sources))
