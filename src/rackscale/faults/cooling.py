"""CDU telemetry and valve commands on the digital twin: lifecycle's `CoolingDriver`, SIMULATED.

`TwinCoolingDriver` satisfies the `CoolingDriver` protocol of lifecycle/drivers.py (`read()`
and `set_valve(rack, open_)`) structurally: Protocols are structural, so this room does not
import lifecycle (docs/architecture.md: faults may import fleet only) and lifecycle does not import
faults; the CLI, which may import both, plugs one into the other.

What a reading holds, and where each figure comes from:
- flow (L/min) = the twin's telemetry (`TwinHardware.thermal`), the same reading certify's
  thermal probe gets: a healthy CDU delivers HEALTHY_MARGIN x its rack's need, and
  `coolant_flow_low` with severity s delivers s of the need (x the twin's ~1% noise), so
  s = 0.5 on a 190 kW rack reads ~136 L/min against a 272 L/min need; a `flapping` one is
  present per the twin's own duty/phase/time rule (`TwinHardware.state(t)`), with t taken
  from `clock`. A closed valve reads 0.
- inlet (°C): the twin models no supply temperature, so it reads SUPPLY_C, the facility
  water's nominal, without noise.
- leaks: the fault kinds (docs/formats.md) have no leak kind, so leaks exist only through
  `inject_leak(tray)`, called by tests or by whoever drives the twin.
Noise is the twin's: keyed on (seed, call number), so the same seed and the same sequence of
reads and fault changes give the same readings.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rackscale.errors import UserError
from rackscale.faults.spec import FaultsFile
from rackscale.faults.twin import TwinHardware
from rackscale.fleet import (
    COMPUTE_TRAY,
    NODE,
    NOMINAL_FLOW_MARGIN,
    NOMINAL_INLET_C,
    CduReading,
    Topology,
)

# The twin models no supply temperature and gives a healthy CDU the plant's usual margin.
HEALTHY_MARGIN = NOMINAL_FLOW_MARGIN
SUPPLY_C = NOMINAL_INLET_C


class TwinCoolingError(UserError):
    pass


# A twin reading is the fleet's CduReading; the name marks it SIMULATED where it is built.
TwinCduReading = CduReading


@dataclass(frozen=True, slots=True)
class ValveCommand:
    time: float
    rack: str
    open_: bool


class TwinCoolingDriver:
    """Every rack's CDU on a `TwinHardware` built from the topology and a faults file."""

    def __init__(self, topo: Topology, faults: FaultsFile | None = None, *, seed: int = 0,
                 noise: float = 0.01, clock: Callable[[], float] = time.time,
                 margin: float = HEALTHY_MARGIN) -> None:
        self.topo = topo
        self.seed = seed
        self.noise = noise
        self.clock = clock
        # TwinHardware owns the margin (and refuses one under 1): one flow figure per CDU
        self.hw = TwinHardware(topo, faults, seed=seed, noise=noise, flow_margin=margin)
        self._rack_ids = [r.id for r in topo.racks]
        self._rack_nos = np.arange(len(topo.racks))
        self.valve_open: dict[str, bool] = dict.fromkeys(self._rack_ids, True)
        self.leaks: dict[str, set[str]] = {}
        self.critical: set[str] = set()
        self.log: list[ValveCommand] = []

    # ------------------------------------------------------------------ CoolingDriver
    def read(self) -> dict[str, TwinCduReading]:
        th = self.hw.thermal(self._rack_nos, self.clock())
        flow = th.flow_lpm  # the twin's one reading per CDU, margin included
        empty: frozenset[str] = frozenset()
        out: dict[str, TwinCduReading] = {}
        for i, rid in enumerate(self._rack_ids):
            is_open = self.valve_open[rid]
            leaks = self.leaks.get(rid)
            out[rid] = TwinCduReading(
                rack=rid, flow_lpm=float(flow[i]) if is_open else 0.0, inlet_c=SUPPLY_C,
                valve_open=is_open, leaking_trays=frozenset(leaks) if leaks else empty,
                critical_leak=rid in self.critical)
        return out

    def set_valve(self, rack: str, open_: bool) -> None:
        self._rack_known(rack)
        self.valve_open[rack] = open_
        self.log.append(ValveCommand(self.clock(), rack, open_))

    # ------------------------------------------------------------------ driving the twin
    def set_faults(self, faults: FaultsFile | None) -> None:
        """Swap the faults the twin applies (a fault appears or clears between passes). The
        twin is rebuilt with the same seed, so its noise sequence starts again from call 1."""
        self.hw = TwinHardware(self.topo, faults, seed=self.seed, noise=self.noise)

    def inject_leak(self, tray: str, *, critical: bool = False) -> None:
        """A leak at a compute tray (or HGX node); `critical` also flags the rack's CDU."""
        i = self.topo.idx(tray)
        kind = self.topo.kinds[i]
        if kind not in (COMPUTE_TRAY, NODE):
            raise TwinCoolingError(f"{tray} is a {kind}; leaks are injected at a "
                                   f"{COMPUTE_TRAY} or {NODE}")
        rack = self.topo.racks[self.topo.rack_of[i]].id
        self.leaks.setdefault(rack, set()).add(tray)
        if critical:
            self.critical.add(rack)

    def _rack_known(self, rack: str) -> None:
        if rack not in self.valve_open:
            raise TwinCoolingError(f"the twin has no CDU of rack {rack!r}; racks: "
                                   f"{', '.join(self._rack_ids[:8])}"
                                   + (" ..." if len(self._rack_ids) > 8 else ""))
