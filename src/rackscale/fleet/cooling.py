"""What a rack's CDU reports: one reading type shared by every cooling driver.

The lifecycle controller reads it from a simulated plant, and the digital twin (faults/)
produces it too; both import it from here so neither room imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

# Facility supply water inside ASHRAE W32..W45 (docs/figures.md, Cooling).
NOMINAL_INLET_C = 32.0
# A healthy CDU delivers some margin above the rack's need (1.43 L/min per kW at a 10 K rise).
NOMINAL_FLOW_MARGIN = 1.15


@dataclass(frozen=True, slots=True)
class CduReading:
    rack: str
    flow_lpm: float
    inlet_c: float
    valve_open: bool
    leaking_trays: frozenset[str] = frozenset()
    critical_leak: bool = False
