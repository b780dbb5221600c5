"""The lab's state file: the plan, every resource it created (recorded BEFORE creating it, so a
crash midway leaves nothing unrecorded) and the faults applied. Written with durable.write_atomic
(temp file, fsync, rename, directory fsync): a reader sees the old or the new state, whole."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.lab.plan import BridgePlan, LabPlan, RankPlan

STATE_VERSION = 1
STATE_FILE = "lab-state.json"
# resource types, in the order `lab down` removes them (processes first, namespaces last)
REMOVAL_ORDER = ("process", "cgroup", "link", "netns")


class LabStateError(UserError):
    pass


def plan_from_dict(d: dict[str, Any]) -> LabPlan:
    return LabPlan(**(d | {"ranks": tuple(RankPlan(**r) for r in d["ranks"]),
                           "bridges": tuple(BridgePlan(**b) for b in d["bridges"])}))


class LabState:
    """One lab's state file. Mutate through the methods; each one saves."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def new(cls, state_dir: Path, plan: LabPlan, fleet_file: str | None) -> LabState:
        state_dir.mkdir(parents=True, exist_ok=True)
        st = cls(state_dir / STATE_FILE, {
            "version": STATE_VERSION, "status": "building", "fleet_file": fleet_file,
            "plan": asdict(plan), "resources": [], "faults": []})
        st.save()
        return st

    @classmethod
    def load(cls, state_dir: Path) -> LabState | None:
        path = state_dir / STATE_FILE
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise LabStateError(f"{path}: unreadable lab state ({err}). Fix: inspect it; "
                                "`rackscale lab down` needs it to remove what the lab "
                                "created") from None
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise LabStateError(f"{path}: lab state version {data.get('version')!r} is not "
                                f"{STATE_VERSION}")
        return cls(path, data)

    @property
    def plan(self) -> LabPlan:
        return plan_from_dict(self.data["plan"])

    @property
    def status(self) -> str:
        return str(self.data["status"])

    @property
    def resources(self) -> list[dict[str, Any]]:
        return list(self.data["resources"])

    @property
    def faults(self) -> list[dict[str, Any]]:
        return list(self.data["faults"])

    def set_status(self, status: str) -> None:
        self.data["status"] = status
        self.save()

    def record(self, entries: list[dict[str, Any]]) -> None:
        """Note resources about to be created (saved before the caller creates them)."""
        have = {json.dumps(r, sort_keys=True) for r in self.data["resources"]}
        for e in entries:
            if json.dumps(e, sort_keys=True) not in have:
                self.data["resources"].append(e)
        self.save()

    def forget(self, entry: dict[str, Any]) -> None:
        self.data["resources"] = [r for r in self.data["resources"] if r != entry]
        self.save()

    def set_faults(self, faults: list[dict[str, Any]]) -> None:
        self.data["faults"] = faults
        self.save()

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.data, indent=1, sort_keys=True))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def require_up(state_dir: Path, who: str) -> LabState:
    """The lab recorded in `state_dir`, which must be up. A directory the user named that holds
    no lab is a mistake to stop on (a typo would otherwise run off the lab and certify a
    faulted lab as clean), never a reason to fall back to something else."""
    st = LabState.load(state_dir)
    if st is None:
        what = ("the directory does not exist" if not state_dir.exists() else
                f"no {STATE_FILE} there")
        raise LabStateError(f"{who}: no lab is recorded in {state_dir} ({what}). Fix: build "
                            f"the lab with "
                            f"`rackscale lab up --lab {state_dir}`, or give the directory "
                            "of a lab that is up")
    if st.status != "up":
        raise LabStateError(f"{who}: the lab in {state_dir} is {st.status}, not up. Fix: "
                            f"`rackscale lab down --lab {state_dir}`, then "
                            f"`rackscale lab up --lab {state_dir}`")
    return st
