"""The lab: a real miniature multi-rack cluster on one Linux host (root). Network namespaces
as GPU ranks, bridges as leaves, spines and NVLink domains, veths shaped by tc, cgroups for
CPU shares, and faults applied for real. Everything it creates is recorded in its state file
and removed by `down`, by name and id."""

from importlib import resources
from pathlib import Path

from rackscale.lab.build import LabError, down, status, up
from rackscale.lab.injector import NOT_REAL, check_real, clear, inject, lift
from rackscale.lab.places import rank_places
from rackscale.lab.plan import LabPlan, LabPlanError, make_plan
from rackscale.lab.state import LabState, LabStateError, require_up
from rackscale.lab.system import LabSystemError, why_not_here

DEFAULT_STATE_DIR = Path("rackscale-data") / "lab"


def default_fleet_path() -> str:
    """The lab fleet shipped with rackscale: 2 lab-mini racks (8 ranks)."""
    return str(resources.files("rackscale.lab").joinpath("data", "lab.yaml"))


def load_state(state_dir: Path) -> LabState | None:
    return LabState.load(state_dir)


__all__ = ["DEFAULT_STATE_DIR", "NOT_REAL", "LabError", "LabPlan", "LabPlanError", "LabState",
           "LabStateError", "LabSystemError", "check_real", "clear", "default_fleet_path",
           "down", "inject", "lift", "load_state", "make_plan", "rank_places", "require_up",
           "status", "up", "why_not_here"]
