"""The two driver seams of the controller, and their simulated implementations.

`PowerDriver` switches power targets (a rack's shelves `ps1..psN` and its trays/nodes) and caps
rack power; `RedfishPowerDriver` (redfish.py) speaks real HTTP to BMCs, `SimPowerDriver` drives
a simulated plant. `CoolingDriver` reads CDU telemetry and moves valves; `SimCoolingDriver`
simulates a CDU per rack. The protocol is deliberately narrow (a `read()` of `CduReading`s and
`set_valve`) so the driver backed by the certification room's digital twin
(`faults.TwinCoolingDriver`: `coolant_flow_low` with a severity sets the flow, leaks are
injected) plugs in without touching the controller; readings are typed by the `CduTelemetry`
Protocol, so that room need not import this one.

The simulated plant can persist to a JSON file (a snapshot) and a journal of the commands since
(one line each), so the hardware "remembers" what was switched on across controller restarts
(the kill -9 test relies on it, as a real rack would); `SimPlant.load` reads both.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.fleet import (
    COMPUTE_TRAY,
    NODE,
    NOMINAL_FLOW_MARGIN,
    NOMINAL_INLET_C,
    POWER_SHELF,
    CduReading,
    Topology,
)
from rackscale.inputs import InputError, read_text

# ASHRAE W45 is the warmest liquid-cooling supply class (docs/figures.md): above it the coolant can
# no longer carry the rack's heat at the design rise.
DEFAULT_MAX_INLET_C = 45.0


class DriverError(UserError):
    pass



class CduTelemetry(Protocol):
    """What the controller reads of a CDU reading. `CduReading` has it, and so does the
    digital twin's `faults.TwinCduReading`, without either room importing the other."""

    @property
    def rack(self) -> str: ...
    @property
    def flow_lpm(self) -> float: ...
    @property
    def inlet_c(self) -> float: ...
    @property
    def valve_open(self) -> bool: ...
    @property
    def leaking_trays(self) -> frozenset[str]: ...
    @property
    def critical_leak(self) -> bool: ...


@runtime_checkable
class PowerDriver(Protocol):
    def observe(self) -> dict[str, bool]:
        """Power state of every target it knows (component id -> on)."""
        ...

    def set_power(self, target: str, on: bool) -> None: ...

    def caps(self) -> dict[str, float]:
        """Racks under a power cap -> fraction of nameplate allowed."""
        ...

    def set_cap(self, rack: str, fraction: float | None) -> None: ...


@runtime_checkable
class CoolingDriver(Protocol):
    def read(self) -> Mapping[str, CduTelemetry]:
        """The latest reading of every rack's CDU, keyed by rack id."""
        ...

    def set_valve(self, rack: str, open_: bool) -> None: ...


def power_targets(topo: Topology) -> dict[str, tuple[list[str], list[str]]]:
    """rack id -> (shelves in sequence order, trays/nodes)."""
    # Racks of one template and size share one layout: where their shelves and trays sit is
    # found once per layout, not by walking 250k components at 128k GPUs (0.1 s a command).
    ids, kinds = topo.ids, topo.kinds
    where: dict[tuple[str, int, int], tuple[list[int], list[int]]] = {}
    out: dict[str, tuple[list[str], list[str]]] = {}
    for rack in topo.racks:
        first = rack.first
        key = (rack.template.name, rack.trays, rack.end - first)
        if key not in where:
            shelves = [j - first for j in range(first, rack.end) if kinds[j] == POWER_SHELF]
            shelves.sort(key=lambda o: int(ids[first + o].rsplit("/ps", 1)[1]))
            trays = [j - first for j in range(first, rack.end)
                     if kinds[j] in (COMPUTE_TRAY, NODE)]
            where[key] = (shelves, trays)
        at_shelves, at_trays = where[key]
        out[rack.id] = ([ids[first + o] for o in at_shelves], [ids[first + o] for o in at_trays])
    return out


@dataclass(slots=True)
class Command:
    time: float
    target: str
    action: str  # "on" | "off" | "cap" | "uncap" | "valve_open" | "valve_close"


@dataclass(slots=True)
class SimPlant:
    """The simulated racks: what is powered, capped, flowing, leaking. One object shared by the
    simulated power and cooling drivers, optionally persisted to `path` after every command."""

    power: dict[str, bool]
    caps: dict[str, float]
    flow_lpm: dict[str, float]
    inlet_c: dict[str, float]
    valve_open: dict[str, bool]
    leaks: dict[str, set[str]]
    critical: set[str]
    nominal_flow: dict[str, float]
    path: Path | None = None
    clock: Callable[[], float] = time.time
    log: list[Command] = field(default_factory=list)
    # Simulated hardware latency of one power-on, real seconds (0 = instant).
    power_on_latency_s: float = 0.0
    journaled: int = 0  # commands in the journal since the last snapshot

    @classmethod
    def for_topology(cls, topo: Topology, *, path: str | Path | None = None,
                     clock: Callable[[], float] = time.time) -> SimPlant:
        p = Path(path) if path else None
        if p is not None and p.exists():
            return cls.load(p, clock=clock)
        targets = power_targets(topo)
        nominal = {r.id: round(r.required_flow_lpm * NOMINAL_FLOW_MARGIN, 1) for r in topo.racks}
        plant = cls(
            power={t: False for sh, tr in targets.values() for t in (*sh, *tr)},
            caps={}, flow_lpm=dict(nominal), inlet_c=dict.fromkeys(nominal, NOMINAL_INLET_C),
            valve_open=dict.fromkeys(nominal, True), leaks={}, critical=set(),
            nominal_flow=nominal, path=p, clock=clock,
        )
        plant.save()
        return plant

    @classmethod
    def load(cls, path: Path, *, clock: Callable[[], float] = time.time) -> SimPlant:
        try:
            d = json.loads(read_text(path, "simulated plant state"))
            plant = cls(power=d["power"], caps=d["caps"], flow_lpm=d["flow_lpm"],
                        inlet_c=d["inlet_c"], valve_open=d["valve_open"],
                        leaks={k: set(v) for k, v in d["leaks"].items()},
                        critical=set(d["critical"]), nominal_flow=d["nominal_flow"],
                        path=path, clock=clock,
                        power_on_latency_s=float(d.get("power_on_latency_s", 0.0)))
            plant._replay(_journal(path))
            if not all(isinstance(x, dict) for x in (plant.power, plant.caps, plant.flow_lpm,
                                                    plant.inlet_c, plant.valve_open,
                                                    plant.nominal_flow)):
                raise TypeError("a section is not a mapping")
        except (InputError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise DriverError(
                f"{path}: the simulated plant state is damaged ({type(err).__name__}: {err}). "
                "It holds only simulated power and coolant state: move it aside (or delete "
                "it) to start from a fresh plant, or give another --plant file"
            ) from None
        return plant

    def save(self) -> None:
        if self.path is None:
            return
        d: dict[str, Any] = {
            "power": self.power, "caps": self.caps, "flow_lpm": self.flow_lpm,
            "inlet_c": self.inlet_c, "valve_open": self.valve_open,
            "leaks": {k: sorted(v) for k, v in self.leaks.items()},
            "critical": sorted(self.critical), "nominal_flow": self.nominal_flow,
            "power_on_latency_s": self.power_on_latency_s,
        }
        # A kill -9 or power loss leaves the old or the new plant, and two processes saving
        # at once never share a temp file. The snapshot holds every command so far: the
        # journal is removed (a crash between the two replays commands the snapshot already
        # holds, which sets the same values again).
        write_atomic(self.path, json.dumps(d))
        _journal(self.path).unlink(missing_ok=True)
        self.journaled = 0

    def record(self, op: str, key: str, value: bool | float | None) -> None:
        """Persist one command as a line of the plant's journal: O(1), where rewriting the
        whole plant after each command made a fleet's onboarding cost grow with the square of
        its size. The snapshot is rewritten once the journal outgrows the plant."""
        if self.path is None:
            return
        with _journal(self.path).open("a", encoding="utf-8") as f:
            f.write(json.dumps([op, key, value]) + "\n")
        self.journaled += 1
        if self.journaled > max(256, len(self.power)):
            self.save()

    def _replay(self, journal: Path) -> None:
        """Apply the journal's commands in order. A torn last line (a crash mid-write) is a
        command the hardware never got; a damaged line before it is a damaged plant."""
        if not journal.exists():
            return
        lines = journal.read_text(encoding="utf-8").splitlines()
        try:  # one decode of every line (46k at 128k GPUs), else line by line to find the bad
            commands = json.loads("[" + ",".join(lines) + "]")
        except ValueError:
            commands = None
        for i, line in enumerate(lines):
            try:
                op, key, value = commands[i] if commands is not None else json.loads(line)
            except ValueError:
                if i == len(lines) - 1:
                    return
                raise ValueError(f"journal {journal} line {i + 1} is damaged") from None
            if op == "power":
                self.power[key] = bool(value)
            elif op == "cap":
                if value is None:
                    self.caps.pop(key, None)
                else:
                    self.caps[key] = float(value)
            elif op == "valve":
                self.valve_open[key] = bool(value)
            else:
                raise ValueError(f"journal {journal} line {i + 1}: unknown command {op!r}")

    def rack_known(self, rack: str) -> None:
        if rack not in self.nominal_flow:
            raise DriverError(f"simulated plant has no rack {rack!r}; racks: "
                              f"{', '.join(sorted(self.nominal_flow)[:8])} ...")

    # ------------------------------------------------------------- faults (tests, demo, CLI)
    def set_flow(self, rack: str, lpm: float | None) -> None:
        self.rack_known(rack)
        self.flow_lpm[rack] = self.nominal_flow[rack] if lpm is None else lpm
        self.save()

    def set_inlet(self, rack: str, celsius: float | None) -> None:
        self.rack_known(rack)
        self.inlet_c[rack] = NOMINAL_INLET_C if celsius is None else celsius
        self.save()

    def set_leak(self, rack: str, trays: set[str], *, critical: bool = False) -> None:
        self.rack_known(rack)
        self.leaks[rack] = set(trays)
        if critical:
            self.critical.add(rack)
        else:
            self.critical.discard(rack)
        self.save()


def _journal(path: Path) -> Path:
    """The plant's command journal, beside its snapshot."""
    return path.with_name(path.name + ".journal")


class SimPowerDriver:
    """PowerDriver over a SimPlant. Power-on of an unknown target is an error, as on a BMC."""

    def __init__(self, plant: SimPlant) -> None:
        self.plant = plant

    def observe(self) -> dict[str, bool]:
        return self.plant.power

    def set_power(self, target: str, on: bool) -> None:
        if target not in self.plant.power:
            raise DriverError(f"no power target {target!r} in the simulated plant")
        if on and self.plant.power_on_latency_s:
            time.sleep(self.plant.power_on_latency_s)  # models the shelf's ramp, not a sync
        self.plant.power[target] = on
        self.plant.log.append(Command(self.plant.clock(), target, "on" if on else "off"))
        self.plant.record("power", target, on)

    def caps(self) -> dict[str, float]:
        return self.plant.caps

    def set_cap(self, rack: str, fraction: float | None) -> None:
        self.plant.rack_known(rack)
        if fraction is None:
            self.plant.caps.pop(rack, None)
        else:
            self.plant.caps[rack] = fraction
        self.plant.log.append(Command(self.plant.clock(), rack,
                                      "uncap" if fraction is None else "cap"))
        self.plant.record("cap", rack, fraction)


class SimCoolingDriver:
    """CoolingDriver over a SimPlant: a closed valve stops the flow."""

    def __init__(self, plant: SimPlant) -> None:
        self.plant = plant

    def read(self) -> dict[str, CduReading]:
        p = self.plant
        empty: frozenset[str] = frozenset()
        return {
            rack: CduReading(
                rack=rack, flow_lpm=p.flow_lpm[rack] if p.valve_open[rack] else 0.0,
                inlet_c=p.inlet_c[rack], valve_open=p.valve_open[rack],
                leaking_trays=frozenset(p.leaks[rack]) if p.leaks.get(rack) else empty,
                critical_leak=rack in p.critical,
            )
            for rack in p.nominal_flow
        }

    def set_valve(self, rack: str, open_: bool) -> None:
        self.plant.rack_known(rack)
        self.plant.valve_open[rack] = open_
        self.plant.log.append(Command(self.plant.clock(), rack,
                                      "valve_open" if open_ else "valve_close"))
        self.plant.record("valve", rack, open_)
