"""The digital twin: what a probe would measure on a fleet with given faults, for a seed.

Every figure here is SIMULATED. The twin keeps one factor array per part family (GPUs, their
NICs, leaves, NVLink switch trays per domain, rack coolant flow, power shelves), applies the
faults to them, and answers a whole batch of probes with numpy in one call, so a ~128k-GPU
fleet is certified in seconds. Noise is multiplicative, ~1% run to run (`noise`), drawn from a
generator keyed on (seed, call number): the same seed and the same sequence of calls give the
same answers.

Physics kept deliberately simple (each line is a modelling choice, not a measurement):
- GEMM = peak BF16 x 0.80 achievable x GPU factor x clock factor; clocks fall when the rack's
  coolant flow is below ~95% of need. `sdc` keeps the speed but returns wrong results.
- all-reduce bus bandwidth follows the fleet's hardware model (`fleet.HardwareModel`, the
  same formula the ladder's expectation uses): a ring runs at its slowest link, NVLink on
  across domains is hierarchical. The twin feeds it faulted rates: NVLink per GPU x 0.80,
  times the member's NVLink port, times the switch trays (traffic is striped over all trays,
  so a slow tray sets the pace and a down tray is routed around: n_up/n of the bandwidth);
  NVLink off, NIC line rate x 0.92 times the NIC's and its leaf's factor. NVLink hides much
  of a scale-out fault in the hierarchical case, which is why the ladder runs multi-rack
  tests with NVLink off.
- power shelves are N+1: a dead shelf reads 0 kW and the others carry the load.
- a `flapping` fault is present while frac(t / period + phase) < duty, phase drawn per seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

import numpy as np

from rackscale.faults.kinds import FLAPPING
from rackscale.faults.spec import Fault, FaultsFile
from rackscale.fleet import (
    CDU,
    GPU,
    LEAF,
    NIC,
    NOMINAL_FLOW_MARGIN,
    POWER_SHELF,
    HardwareModel,
    Topology,
    allreduce_busbw,
)

GEMM_EFFICIENCY = 0.80  # H200 reaches ~790 of 989 TFLOPS dense BF16 (docs/figures.md)
HBM_EFFICIENCY = 0.90  # a copy kernel reaches ~4.3 of 4.8 TB/s on H200 (KINDS.md reading)
NVLINK_EFFICIENCY = 0.80
SCALEOUT_EFFICIENCY = 0.92
THROTTLE_FLOW = 0.95  # clocks start to fall below this fraction of needed coolant flow
MIN_CLOCK = 0.3  # the floor a throttled GPU holds before it trips its thermal shutdown
IDLE_TEMP_C, HOT_TEMP_RISE_C = 62.0, 45.0
DEAD_ERROR = "CUDA error: GPU has fallen off the bus (XID 79)"
TIMEOUT_ERROR = "collective timed out after 30 s (a participant made no progress)"


@overload
def clock_fraction(flow: float) -> float: ...
@overload
def clock_fraction(flow: np.ndarray) -> np.ndarray: ...
def clock_fraction(flow: float | np.ndarray) -> float | np.ndarray:
    """The GPU clock (fraction of nominal) at a coolant flow (fraction of the rack's need).

    The one thermal curve of rackscale: the twin throttles its GEMMs by it and the lab cuts a
    cooled rack's CPU quota by it, so the two cannot disagree on what low flow costs. Linear
    from THROTTLE_FLOW down to MIN_CLOCK, 1.0 at or above THROTTLE_FLOW (a modelling choice,
    module doc). SIMULATED: no measured curve stands behind it."""
    clock = np.clip(np.asarray(flow, dtype=float) / THROTTLE_FLOW, MIN_CLOCK, 1.0)
    return clock if isinstance(flow, np.ndarray) else float(clock)


@dataclass(slots=True)
class FabricState:
    """Factors (1.0 = nominal) of every part at one instant."""

    gemm: np.ndarray
    hbm: np.ndarray
    dead: np.ndarray
    sdc: np.ndarray
    nvport: np.ndarray
    nic: np.ndarray  # indexed by GPU number (one NIC per GPU)
    leaf: np.ndarray
    switch: np.ndarray  # [domain, switch] factor; padding columns stay 1.0
    flow: np.ndarray  # [rack] fraction of needed coolant flow
    shelf: np.ndarray  # [rack, shelf] 1 up / 0 down; padding stays 1.0

    def copy(self) -> FabricState:
        return FabricState(*(getattr(self, f).copy() for f in self.__slots__))


@dataclass(slots=True)
class ThermalReading:
    flow_lpm: np.ndarray  # [racks]
    required_lpm: np.ndarray
    shelf_kw: np.ndarray  # [racks, shelves] (NaN where the rack has fewer shelves)
    gpus: np.ndarray  # GPU numbers covered, rack by rack
    gpu_temp_c: np.ndarray
    gpu_clock_frac: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)  # by position in `gpus`


class TwinHardware:
    """Simulated fleet hardware. `TwinBackend` (certify/) puts the probe interface on it."""

    def __init__(self, topo: Topology, faults: FaultsFile | None = None, *, seed: int = 0,
                 noise: float = 0.01, hardware: HardwareModel | None = None,
                 flow_margin: float = NOMINAL_FLOW_MARGIN) -> None:
        if not 0.0 <= noise < 0.2:
            raise ValueError(f"twin noise {noise} is outside 0..0.2; ~0.01 matches real runs")
        if flow_margin < 1.0:
            raise ValueError(f"twin flow margin {flow_margin} < 1: a healthy CDU would "
                             "deliver less than its rack needs")
        self.topo = topo
        # What a healthy CDU delivers, as a multiple of its rack's need; a coolant_flow_low
        # of severity s delivers s of the need. One reading for every reader: certify's
        # thermal probe and the lifecycle's CDU driver both get this flow.
        self.flow_margin = flow_margin
        # The fleet's hardware model gives SKUs and nominal link rates; the ladder predicts
        # group bandwidth from the same model, so the twin and the ladder cannot disagree
        # about what healthy hardware does.
        self.hardware = hardware if hardware is not None else HardwareModel(topo)
        self.seed = seed
        self.noise = noise
        self.faults = list(faults.faults) if faults else []
        self._calls = 0
        n = len(topo.gpu_ids)
        hw = self.hardware
        self.gemm_nominal = hw.gpu_spec("bf16_dense_tflops") * GEMM_EFFICIENCY
        self.hbm_nominal = hw.gpu_spec("hbm_tbps") * HBM_EFFICIENCY
        self.nvlink_nominal = hw.nvlink_gbps * NVLINK_EFFICIENCY
        self.scaleout_nominal = hw.scaleout_gbps * SCALEOUT_EFFICIENCY
        self.leaf_index = {leaf: i for i, leaf in enumerate(topo.leaves)}
        self.switch_index: dict[str, tuple[int, int]] = {}
        for d, switches in enumerate(topo.domain_switches):
            for k, sw in enumerate(switches):
                self.switch_index[sw] = (d, k)
        self.switches_per_domain = np.asarray([len(s) for s in topo.domain_switches])
        self.shelves_per_rack = np.asarray([r.template.power_shelves for r in topo.racks])
        self.required_lpm = np.asarray([r.required_flow_lpm for r in topo.racks])
        self.rack_power_kw = np.asarray([r.power_kw for r in topo.racks])
        d_max = int(self.switches_per_domain.max(initial=1))
        p_max = int(self.shelves_per_rack.max(initial=1))
        self._base = FabricState(
            gemm=np.ones(n), hbm=np.ones(n), dead=np.zeros(n, bool), sdc=np.zeros(n, bool),
            nvport=np.ones(n), nic=np.ones(n), leaf=np.ones(len(topo.leaves)),
            switch=np.ones((len(topo.domains), d_max)), flow=np.ones(len(topo.racks)),
            shelf=np.ones((len(topo.racks), p_max)),
        )
        self._flapping: list[tuple[Fault, float]] = []
        for i, f in enumerate(self.faults):
            if f.kind == FLAPPING:
                phase = float(np.random.default_rng([seed, 7919, i]).random())
                self._flapping.append((f, phase))
            else:
                self._apply(self._base, f)

    # ------------------------------------------------------------------ faults
    def _apply(self, st: FabricState, f: Fault) -> None:
        topo = self.topo
        kind = f.effective_kind
        s = f.severity if f.severity is not None else 0.0
        i = topo.idx(f.target)
        comp_kind = topo.kinds[i]
        if comp_kind == GPU:
            g = topo.gpu_number(f.target)
            if kind == "slow_gpu":
                st.gemm[g] *= s
            elif kind == "hbm_degraded":
                st.hbm[g] *= s
            elif kind == "gpu_dead":
                st.dead[g] = True
            elif kind == "sdc":
                st.sdc[g] = True
            elif kind == "nvlink_port_down":
                d = topo.gpu_domain[g]
                n_sw = max(1, int(self.switches_per_domain[d]))
                st.nvport[g] *= (n_sw - 1) / n_sw
        elif comp_kind == NIC:
            g = int(np.flatnonzero(topo.gpu_nic == i)[0])
            st.nic[g] *= s  # bad_cable keeps `severity`; nic_dead has 0
        elif comp_kind == LEAF:
            st.leaf[self.leaf_index[f.target]] *= s
        elif comp_kind == CDU:
            st.flow[topo.rack_of[i]] *= s
        elif comp_kind == POWER_SHELF:
            k = int(f.target.rsplit("ps", 1)[1]) - 1
            st.shelf[topo.rack_of[i], k] = 0.0
        else:  # switch tray / NVSwitch chip
            d, k = self.switch_index[f.target]
            st.switch[d, k] *= s

    def state(self, t: float) -> FabricState:
        """Part factors at simulated time t (seconds): flapping faults come and go."""
        if not self._flapping:
            return self._base
        st = self._base.copy()
        for f, phase in self._flapping:
            if (t / f.flap_period_s + phase) % 1.0 < (f.duty or 0.0):
                self._apply(st, f)
        return st

    def _noise(self, shape: int | tuple[int, ...]) -> np.ndarray:
        self._calls += 1
        rng = np.random.default_rng([self.seed, self._calls])
        return 1.0 + self.noise * rng.standard_normal(shape)

    def _clock(self, st: FabricState, gpus: np.ndarray) -> np.ndarray:
        flow: np.ndarray = st.flow[self.topo.gpu_rack[gpus]]
        return clock_fraction(flow)

    # ------------------------------------------------------------------ per GPU
    def gemm(self, gpus: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
        """(TFLOPS, checksum matches, errors by position) of a BF16 GEMM on each GPU."""
        st = self.state(t)
        tflops = self.gemm_nominal[gpus] * st.gemm[gpus] * self._clock(st, gpus) \
            * self._noise(len(gpus))
        dead = st.dead[gpus]
        tflops[dead] = np.nan
        ok = ~st.sdc[gpus] & ~dead
        return tflops, ok, {int(p): DEAD_ERROR for p in np.flatnonzero(dead)}

    def hbm(self, gpus: np.ndarray, t: float) -> tuple[np.ndarray, dict[int, str]]:
        st = self.state(t)
        tbps = self.hbm_nominal[gpus] * st.hbm[gpus] * self._noise(len(gpus))
        dead = st.dead[gpus]
        tbps[dead] = np.nan
        return tbps, {int(p): DEAD_ERROR for p in np.flatnonzero(dead)}

    # ------------------------------------------------------------------ collectives
    def _switch_factor(self, st: FabricState) -> np.ndarray:
        sw = st.switch
        cols = np.arange(sw.shape[1])[None, :] < self.switches_per_domain[:, None]
        up = (sw > 0) & cols
        n_up = up.sum(axis=1)
        slowest = np.where(up, sw, np.inf).min(axis=1, initial=np.inf)
        slowest[n_up == 0] = 0.0
        factor: np.ndarray = (np.minimum(slowest, 1.0) * n_up
                              / np.maximum(self.switches_per_domain, 1))
        return factor

    def allreduce(self, flat: np.ndarray, offsets: np.ndarray, *, nvlink: bool,
                  t: float) -> tuple[np.ndarray, dict[int, str]]:
        """Bus bandwidth (GB/s) of one all-reduce per group; groups are `flat[offsets[i]:
        offsets[i+1]]`, GPU numbers sorted ascending inside each group."""
        topo = self.topo
        st = self.state(t)
        starts = offsets[:-1]
        so = self.scaleout_nominal[flat] * np.minimum(st.nic[flat], st.leaf[topo.gpu_leaf[flat]])
        dom = topo.gpu_domain[flat]
        nv = self.nvlink_nominal[flat] * st.nvport[flat] * self._switch_factor(st)[dom] \
            if nvlink else so
        bw = allreduce_busbw(offsets, dom, nv, so, nvlink=nvlink)
        bw = np.nan_to_num(bw, nan=0.0) * self._noise(len(starts))
        dead_g = np.maximum.reduceat(st.dead[flat].astype(np.int8), starts) > 0
        stalled = dead_g | (bw <= 0)
        bw[stalled] = 0.0
        return bw, {int(p): TIMEOUT_ERROR for p in np.flatnonzero(stalled)}

    def nvlink_plane(self, domains: np.ndarray, t: float) -> tuple[np.ndarray, dict[int, str]]:
        """Bandwidth through each switch tray of each domain ([domain, switch], GB/s; NaN
        where a domain has fewer switches): the fabric's per-plane port counters."""
        st = self.state(t)
        sw = st.switch[domains]
        cols = np.arange(sw.shape[1])[None, :] < self.switches_per_domain[domains][:, None]
        # Each plane carries 1/n of a GPU's NVLink bandwidth.
        first_gpu = np.searchsorted(self.topo.gpu_domain, domains)
        nominal = self.nvlink_nominal[first_gpu] / np.maximum(
            self.switches_per_domain[domains], 1)
        out = nominal[:, None] * sw * self._noise(sw.shape)
        out[~cols] = np.nan
        return out, {}

    # ------------------------------------------------------------------ telemetry
    def thermal(self, racks: np.ndarray, t: float) -> ThermalReading:
        topo = self.topo
        st = self.state(t)
        flow = st.flow[racks]
        gpus = np.concatenate([np.arange(topo.racks[r].gpu_first, topo.racks[r].gpu_end)
                               for r in racks]) if len(racks) else np.zeros(0, np.int64)
        frac = np.minimum(st.flow[topo.gpu_rack[gpus]], 1.0)
        temp = (IDLE_TEMP_C + HOT_TEMP_RISE_C * (1.0 - frac)) * self._noise(len(gpus))
        clock = np.minimum(self._clock(st, gpus) * self._noise(len(gpus)), 1.0)
        dead = st.dead[gpus]
        temp[dead] = np.nan
        clock[dead] = np.nan
        shelves = st.shelf[racks]
        n_sh = self.shelves_per_rack[racks]
        cols = np.arange(shelves.shape[1])[None, :] < n_sh[:, None]
        up = (shelves > 0) & cols
        per_shelf = self.rack_power_kw[racks] / np.maximum(up.sum(axis=1), 1)
        kw = np.where(up, per_shelf[:, None], 0.0) * self._noise(shelves.shape)
        kw[~cols] = np.nan
        return ThermalReading(
            flow_lpm=self.required_lpm[racks] * np.where(flow < 1.0, flow, self.flow_margin)
            * self._noise(len(racks)),
            required_lpm=self.required_lpm[racks], shelf_kw=kw, gpus=gpus, gpu_temp_c=temp,
            gpu_clock_frac=clock,
            errors={int(p): DEAD_ERROR for p in np.flatnonzero(dead)},
        )
