"""The timer behind a flapping fault: applies the flapped kind for duty x period, lifts it for
the rest of the period, and repeats (bounded: at most a day). Started by `lab inject`, stopped
by `lab clear` / `lab down` (by its recorded pid, or through the lab's control cgroup)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from rackscale.faults import FLAPPING
from rackscale.lab.injector import apply
from rackscale.lab.state import LabState

MAX_S = 86400.0


def _steady(state_file: Path) -> list[dict[str, Any]]:
    """The steady faults present now (read at each edge: one lifted since must not come
    back), which a flapped CPU quota composes with."""
    st = LabState.load(state_file.parent)
    return [g for g in st.faults if g["kind"] != FLAPPING] if st is not None else []


def main(argv: list[str]) -> int:
    st = LabState.load(Path(argv[0]))
    if st is None:
        return 2
    f = st.faults[int(argv[1])]
    if f["kind"] != FLAPPING:
        return 2
    plan = st.plan
    period = float(f["period_s"] or 600.0)
    duty = float(f["duty"])
    end = time.monotonic() + MAX_S
    t0 = time.monotonic()
    cycle = 0
    while time.monotonic() < end:
        # on/off edges at fixed times from the start, so the duty holds however long tc takes
        apply(plan, f["of"], f["target"], f["severity"], on=True, others=_steady(st.path))
        time.sleep(max(0.0, t0 + cycle * period + duty * period - time.monotonic()))
        apply(plan, f["of"], f["target"], f["severity"], on=False, others=_steady(st.path))
        cycle += 1
        time.sleep(max(0.0, t0 + cycle * period - time.monotonic()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
