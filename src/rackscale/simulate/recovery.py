"""Measured recovery figures for the simulator: the restart cost of supervised jobs' incidents
instead of its assumed detection latency and restart overhead.

The cost of one interruption is the median, over the completed recoveries, of the measured
time from the fault to the job running again (detect + decision to the first step). It
replaces `restart_min` and the per-cause detection latency (`detect_min` 0: detection is
inside the measured figure); the result says which it used, and from how many incidents.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from rackscale.errors import UserError
from rackscale.incidents import incident_restart_cost_s as restart_cost_s
from rackscale.simulate.config import SimConfig


class RecoveryFileError(UserError):
    """A --recovery file that is not `rackscale job incidents --json` output (exit 2)."""


def incidents_from_file(path: Path) -> list[dict[str, Any]]:
    """The incident rows of a `rackscale job incidents --json` file."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise RecoveryFileError(f"{path}: cannot read it ({err.strerror}); give the output "
                                "of `rackscale job incidents --json`") from None
    except ValueError as err:
        raise RecoveryFileError(f"{path}: line {getattr(err, 'lineno', '?')}: not JSON; give "
                                "the output of `rackscale job incidents --json`") from None
    rows = doc.get("incidents") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise RecoveryFileError(f"{path}: field `incidents`: a list of incidents expected; "
                                "give the output of `rackscale job incidents --json`")
    return rows


def measured_recovery(rows: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """The measured restart cost of the completed recoveries in `rows`; a UserError when none
    completed (the simulator would otherwise silently keep its assumption)."""
    costs = [c for c in map(restart_cost_s, rows) if c is not None]
    if not costs:
        raise RecoveryFileError(f"{source}: no completed recovery among {len(rows)} "
                                "incidents (none has detect_s and a restart time); run a job "
                                "under `rackscale job run --db ...`, or drop --recovery")
    return {"basis": "measured", "incidents": len(costs), "source": source,
            "restart_cost_s": round(statistics.median(costs), 4)}


def with_recovery(cfg: SimConfig, measured: dict[str, Any] | None) -> tuple[
        SimConfig, dict[str, Any]]:
    """`cfg` with the measured restart cost applied, and the label of what the run used."""
    if measured is None:
        return cfg, {"basis": "assumed", "restart_min": cfg.restart_min,
                     "detect_min": cfg.detect_min}
    if cfg.storage is not None:
        # The measured figure already holds the restore; --storage would add it again.
        raise RecoveryFileError("--recovery/--recovery-from-store and --storage: the measured "
                                "restart cost already includes the checkpoint restore; give "
                                "one of them")
    restart_min = measured["restart_cost_s"] / 60
    return (cfg.model_copy(update={"restart_min": restart_min, "detect_min": 0.0}),
            measured | {"restart_min": round(restart_min, 6), "detect_min": 0.0})
