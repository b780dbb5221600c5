"""Lifecycle test helpers (a simulated clock, a small fleet, a controller rig).

A module of its own, not conftest: several test folders have a conftest.py, and
`from conftest import ...` inside a test would pick whichever was imported last.
"""

from __future__ import annotations

from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.lifecycle import (
    Controller,
    SimCoolingDriver,
    SimPlant,
    SimPowerDriver,
    SimSlurm,
    node_name,
    power_targets,
)
from rackscale.store import Store, load_topology


class SimClock:
    def __init__(self, t: float = 1_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


def small_spec(budget_kw: float | None = 400.0) -> FleetSpec:
    """Region `a`: 3 x 190 kW racks under `budget_kw` (two fit); region `b`: 1 rack, no budget."""
    return FleetSpec(name="lc-test", regions=[
        RegionSpec(name="a", racks=[RackGroup(template="vr-nvl72", count=3)],
                   power_budget_kw=budget_kw),
        RegionSpec(name="b", racks=[RackGroup(template="vr-nvl72", count=1)]),
    ])


class Rig:
    def __init__(self, db: str, spec: FleetSpec) -> None:
        self.topo = Topology.build(spec)
        self.store = Store(db)
        load_topology(self.store, self.topo)
        self.clock = SimClock()
        self.plant = SimPlant.for_topology(self.topo, clock=self.clock)
        self.power = SimPowerDriver(self.plant)
        self.cooling = SimCoolingDriver(self.plant)
        trays = [t for _, tr in power_targets(self.topo).values() for t in tr]
        self.slurm = SimSlurm([node_name(t) for t in trays])
        self.ctl = Controller(self.store, self.topo, self.power, self.cooling, slurm=self.slurm,
                              clock=self.clock)
        self.ctl.enroll()
