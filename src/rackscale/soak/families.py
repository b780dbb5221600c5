"""A soak's recovery costs by fault family, as measured: what each family of fault cost the
job at each step of its recovery, and which of the simulator's inputs it feeds.

The families are the operator's: a GPU that stops, a GPU that runs slow, a network part, a
rack's cooling, software. The simulator has two classes of fault, fail-stop and fail-slow
(its stragglers), so the prediction pools the families of each class into one figure per
input; this table keeps them apart, so a family whose costs differ from its class's mean is
seen, measured, where the prediction's pooled input hides it.
"""

from __future__ import annotations

import statistics
from typing import Any

# The lab's action -> its family. A host crash is played on the lab as a killed rank, so it
# counts as software here; a flapping cable is a network part.
FAMILY_OF_ACTION: dict[str, str] = {
    "gpu_dead": "fail-stop GPU",
    "slow_gpu": "fail-slow GPU",
    "bad_cable": "network",
    "flapping": "network",
    "leaf_degraded": "network",
    "nic_dead": "network",
    "coolant_flow_low": "rack cooling",
    "kill": "software",
    "hang": "software",
}
FAMILIES = ("fail-stop GPU", "fail-slow GPU", "network", "rack cooling", "software")
# Which simulator class a family's faults are in: fail-stop feeds detect_min and
# restart_min; fail-slow feeds straggler_detect_min, straggler_slowdown and (found) restart_min.
SIM_CLASS = {"fail-stop GPU": "fail-stop", "software": "fail-stop", "fail-slow GPU": "fail-slow",
             "network": "fail-slow", "rack cooling": "fail-slow"}
FEEDS = {"fail-stop": "detect_min, restart_min",
         "fail-slow": "straggler_detect_min, straggler_slowdown, restart_min"}
# step -> (what it is, where in a fault's row it is measured)
RECOVERY_STEPS: dict[str, str] = {
    "detect_s": "injection to the supervisor's detection (time_to_detect_s)",
    "degraded_s": "badput while the job ran degraded before detection (running_degraded)",
    "localize_s": "badput naming the part (localization: the targeted probe)",
    "drain_s": "badput stopping the job's ranks (stop)",
    "restart_s": "badput relaunching on spares (restart)",
    "restore_s": "badput loading the last good checkpoint (restore)",
    "lost_s": "work redone since that checkpoint (lost_work)",
    "recertify_s": "the struck part's recertification, fault lifted to slots returned "
                   "(recertified.took_s); beside the job, not on its path while spares last",
}
_BADPUT = {"degraded_s": "running_degraded", "localize_s": "localization", "drain_s": "stop",
           "restart_s": "restart", "restore_s": "restore", "lost_s": "lost_work"}


def family_of(action: str) -> str:
    """The family of a lab action (`kill`, `gpu_dead`, ...); ValueError names the known ones."""
    try:
        return FAMILY_OF_ACTION[action]
    except KeyError:
        raise ValueError(f"lab action {action!r} has no fault family; known: "
                         f"{', '.join(sorted(FAMILY_OF_ACTION))}") from None


def _step(row: dict[str, Any], step: str) -> float | None:
    if step == "detect_s":
        t = row.get("time_to_detect_s") if row.get("detected") else None
        return None if t is None else float(t)
    if step == "recertify_s":
        rc = row.get("recertified") or {}
        return float(rc["took_s"]) if rc.get("took_s") is not None else None
    value = (row.get("badput_s") or {}).get(_BADPUT[step])
    return None if value is None else float(value)


def by_family(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Family -> its faults (indices), the simulator class it feeds, and per recovery step the
    mean over its faults that measured the step (None: none did), each with how many did."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in result.get("faults", []):
        groups.setdefault(family_of(str(row["action"])), []).append(row)
    table: dict[str, dict[str, Any]] = {}
    for fam in sorted(groups, key=FAMILIES.index):
        rows = groups[fam]
        steps: dict[str, Any] = {}
        for step in RECOVERY_STEPS:
            xs = [x for r in rows if (x := _step(r, step)) is not None]
            steps[step] = {"value": round(statistics.fmean(xs), 3) if xs else None,
                           "n": len(xs), "basis": "measured" if xs else "not measured"}
        cls = SIM_CLASS[fam]
        table[fam] = {"faults": [int(r["index"]) for r in rows], "sim_class": cls,
                      "feeds": FEEDS[cls], "steps": steps}
    return table


def step_cells(family: dict[str, Any]) -> list[str]:
    """One family's row of `by_family` as table cells: seconds per step, `-` unmeasured."""
    return ["-" if (v := family["steps"][k]["value"]) is None else f"{v:.1f}"
            for k in RECOVERY_STEPS]
