"""The real controller over the digital twin's CDUs (`faults.TwinCoolingDriver`): the coolant
interlock holds a rack whose CDU has `coolant_flow_low`, a fault that appears later gets the
tiered load shed within its deadlines, and readings are deterministic per seed."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lc_rig import SimClock, small_spec
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.faults import (
    HEALTHY_MARGIN,
    Fault,
    FaultsFile,
    TwinCoolingDriver,
    TwinCoolingError,
    faults_from,
)
from rackscale.fleet import Topology
from rackscale.lifecycle import (
    INTERLOCK,
    Controller,
    CoolantTier,
    CoolingDriver,
    FaultPolicy,
    SimPlant,
    SimPowerDriver,
    set_goal,
    state_of,
)
from rackscale.store import Store, load_topology

SICK = "b/r01"
Maker = Callable[..., "TwinRig"]


def _low(rack: str, severity: float = 0.5) -> Fault:
    return Fault(target=f"{rack}/cdu", kind="coolant_flow_low", severity=severity)


class TwinRig:
    def __init__(self, db: str, faults: list[Fault], seed: int = 11) -> None:
        self.topo = Topology.build(small_spec())
        self.store = Store(db)
        load_topology(self.store, self.topo)
        self.clock = SimClock()
        self.plant = SimPlant.for_topology(self.topo, clock=self.clock)  # power only
        self.cdu = TwinCoolingDriver(self.topo, faults_from(faults, self.topo), seed=seed,
                                     clock=self.clock)
        self.ctl = Controller(self.store, self.topo, SimPowerDriver(self.plant), self.cdu,
                              clock=self.clock)
        self.ctl.enroll()

    def onboard(self, goal: str = "burn_in") -> None:
        set_goal(self.store, list(self.ctl.targets), goal)
        self.ctl.run(until_idle=True, max_passes=200)

    def ever_on(self, rack: str) -> list[str]:
        return [c.target for c in self.plant.log
                if c.action == "on" and c.target.startswith(rack + "/")]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Maker]:
    made: list[TwinRig] = []

    def build(faults: list[Fault], seed: int = 11) -> TwinRig:
        r = TwinRig(f"sqlite:///{tmp_path / f'twin{len(made)}.db'}", faults, seed)
        made.append(r)
        return r

    yield build
    for r in made:
        r.store.close()


def test_twin_driver_is_a_cooling_driver(make: Maker) -> None:
    rig = make([])
    assert isinstance(rig.cdu, CoolingDriver)
    with pytest.raises(TwinCoolingError, match="leaks are injected at a"):
        rig.cdu.inject_leak("b/r01/cdu")
    with pytest.raises(TwinCoolingError, match="racks: a/r01"):
        rig.cdu.set_valve("b/r09", False)


def test_flow_low_rack_is_never_powered_healthy_rack_is(make: Maker) -> None:
    rig = make([_low(SICK, 0.5)])
    rig.onboard()
    need = rig.ctl.racks[SICK].required_flow_lpm
    assert state_of(rig.store, SICK).state == "cabled"
    assert rig.ever_on(SICK) == []  # not one shelf or tray of it was ever switched on
    assert state_of(rig.store, "a/r01").state == "burn_in"  # healthy, same twin
    assert rig.ever_on("a/r01")
    holds = rig.store.events(component_id=SICK, kind=INTERLOCK)
    assert len(holds) == 1, [e.payload for e in holds]  # logged once, not every pass
    p = holds[0].payload
    assert p["rule"] == "cooling_verify" and p["action"] == "hold"
    assert p["required_lpm"] == pytest.approx(need, abs=0.1)
    assert p["flow_lpm"] == pytest.approx(0.5 * need, rel=0.05)  # severity: of the need
    assert f"required {need:.0f} L/min" in holds[0].reason
    # More passes change nothing and write nothing while the fault stays.
    n = rig.store.count_events()
    for _ in range(3):
        rig.clock.advance(5)
        assert not rig.ctl.reconcile().changed
    assert rig.store.count_events() == n and rig.ever_on(SICK) == []
    # The fault clears: the rack is verified and powered.
    rig.cdu.set_faults(None)
    rig.ctl.run(until_idle=True, max_passes=50)
    assert state_of(rig.store, SICK).state == "burn_in" and rig.ever_on(SICK)


def test_fault_appearing_later_gets_tiered_load_shed(make: Maker) -> None:
    pol = FaultPolicy()
    rig = make([])
    rig.onboard()
    rig.store.append_event(SICK, "certify.result", {"verdict": "pass", "run_id": "x"})
    set_goal(rig.store, [SICK], "production")
    rig.ctl.run(until_idle=True, max_passes=10)
    assert state_of(rig.store, SICK).state == "production"
    rig.cdu.set_faults(FaultsFile(faults=[_low(SICK, 0.5)]))  # between two passes
    t0 = rig.clock()
    seen: dict[str, float] = {}
    for _ in range(30):
        rig.ctl.reconcile()
        for e in rig.store.events(component_id=SICK, kind=INTERLOCK):
            seen.setdefault(e.payload["action"], e.payload["at"] - t0)
        rig.clock.advance(pol.period_s)
    for tier in (CoolantTier.WARN, CoolantTier.CAP, CoolantTier.DRAIN, CoolantTier.OFF,
                 CoolantTier.ISOLATE):
        assert seen[tier.name.lower()] <= pol.deadline(tier), seen
    assert seen["cap"] < seen["drain"] < seen["off"] < seen["isolate"]
    tos = [e.payload["to"] for e in rig.store.events(component_id=SICK,
                                                     kind="lifecycle.transition")]
    assert tos[-4:] == ["degraded", "draining", "maintenance", "isolated"]
    r = rig.cdu.read()[SICK]
    assert not r.valve_open and r.flow_lpm == 0.0  # a closed valve gives no flow
    assert not any(v for t, v in rig.plant.power.items() if t.startswith(SICK + "/"))
    assert state_of(rig.store, "a/r01").state == "burn_in"  # the healthy rack untouched


def test_leaks_by_explicit_injection_isolate_the_rack(make: Maker) -> None:
    rig = make([])
    rig.onboard()
    trays = rig.ctl.targets[SICK][1]
    for t in trays[:3]:
        rig.cdu.inject_leak(t)
    rig.ctl.reconcile()
    assert state_of(rig.store, SICK).state == "isolated"
    assert not rig.cdu.valve_open[SICK]
    assert not any(v for t, v in rig.plant.power.items() if t.startswith(SICK + "/"))


def test_same_seed_same_readings_and_flapping_follows_the_twin() -> None:
    topo = Topology.build(small_spec())
    flap = Fault(target="a/r02/cdu", kind="flapping", of="coolant_flow_low", severity=0.5,
                 duty=0.5, period_s=100.0)
    ff = faults_from([_low(SICK, 0.7), flap], topo)

    def trace(seed: int) -> list[dict[str, float]]:
        clock = SimClock(0.0)
        d = TwinCoolingDriver(topo, ff, seed=seed, clock=clock)
        out = []
        for _ in range(200):
            out.append({k: r.flow_lpm for k, r in d.read().items()})
            clock.advance(5.0)
        return out

    a, b, c = trace(3), trace(3), trace(4)
    assert a == b and a != c
    need = topo.racks[0].required_flow_lpm
    nominal = need * HEALTHY_MARGIN
    for row in a:  # ~1% noise around the nominal, the fault's severity, or healthy
        assert row["a/r01"] == pytest.approx(nominal, rel=0.05)
        assert row[SICK] == pytest.approx(0.7 * need, rel=0.05)
    low = [row["a/r02"] < need for row in a]
    assert 0.4 <= sum(low) / len(low) <= 0.6  # present `duty` of the time
    # and exactly when the twin's own rule says so
    d = TwinCoolingDriver(topo, ff, seed=3)
    rack_no = next(i for i, r in enumerate(topo.racks) if r.id == "a/r02")
    assert low == [d.hw.state(5.0 * i).flow[rack_no] < 1.0 for i in range(200)]


def test_cli_run_with_faults_holds_the_sick_rack(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    db, plant = f"sqlite:///{tmp_path / 'cli.db'}", str(tmp_path / "plant.json")
    faults = tmp_path / "faults.yaml"
    faults.write_text("faults:\n  - {target: us-west/r03/cdu, kind: coolant_flow_low, "
                      "severity: 0.5}\n")
    assert runner.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", db]).exit_code == 0
    base = ["--db", db, "--plant", plant, "--faults", str(faults)]
    res = runner.invoke(app, ["lifecycle", "run", "--until-idle", "--period", "0", "--goal",
                              "burn_in", *base])
    assert res.exit_code == 0, res.output
    assert "digital twin (simulated)" in res.output
    store = Store(db)
    assert state_of(store, "us-west/r03").state == "cabled"
    assert state_of(store, "us-west/r01").state == "burn_in"
    assert not any(v for t, v in SimPlant.load(Path(plant)).power.items()
                   if t.startswith("us-west/r03/"))
    res = runner.invoke(app, ["lifecycle", "advance", "us-west/r03", "--to",
                              "cooling_verified", "--reason", "try", *base])
    assert res.exit_code == 2 and "coolant flow" in res.output and "required 272" in res.output
    demo = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant,
                               "--faults", "demo"])  # the shipped file: us-west/r03 at 0.5
    assert demo.exit_code == 0 and state_of(store, "us-west/r03").state == "cabled"
    bad = runner.invoke(app, ["lifecycle", "run", "--once", "--db", db, "--plant", plant,
                              "--faults", str(tmp_path / "none.yaml")])
    assert bad.exit_code == 2
    store.close()
