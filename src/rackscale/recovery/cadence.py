"""The checkpoint interval from evidence: Young/Daly's optimum, interval = sqrt(2 x save cost x
mean time between failures), the save cost measured on the job's own saves (the time a save
holds the training loop) and the MTBF given to the job (`job run --mtbf-h`, else the
failure model's rate for the job's GPUs; a soak gives its schedule's).

Rank 0 decides, from its own measurements, and every rank follows: the decision rides in the
step's gradient all-reduce (one element more, which rank 0 sets), so all ranks save the same
steps. The first save comes after `FIRST_SAVE_STEPS` steps (it measures the cost); then a
save is due once the interval has passed since the last one. Each choice is written to
`<job dir>/cadence.json` with its inputs, and the supervisor says it.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.durable import write_atomic

FIRST_SAVE_STEPS = 10  # the first save, which measures what a save costs
COSTS_KEPT = 5  # the saves whose median cost sets the interval: one slow save moves it little
MTBF_ENV, MTBF_FROM_ENV = "RACKSCALE_MTBF_S", "RACKSCALE_MTBF_FROM"
CADENCE_FILE = "cadence.json"


def young_daly_s(save_cost_s: float, mtbf_s: float) -> float:
    """sqrt(2 C M): the interval between saves that loses the least to saves and to the work
    redone after a failure (Young 1974; Daly 2006's first-order term)."""
    if save_cost_s <= 0 or not math.isfinite(mtbf_s) or mtbf_s <= 0:
        raise ValueError(f"Young/Daly needs a positive save cost and a finite MTBF "
                         f"(got {save_cost_s} s, {mtbf_s} s)")
    return math.sqrt(2.0 * save_cost_s * mtbf_s)


@dataclass(slots=True)
class Cadence:
    """Rank 0's side: when the next save is due."""

    mtbf_s: float
    mtbf_from: str
    out: Path | None = None  # cadence.json
    costs: list[float] = field(default_factory=list)
    last_save_t: float | None = None
    interval_s: float | None = None
    steps: int = 0  # steps done since the start of this process

    def due(self, now: float | None = None) -> bool:
        """Whether this step saves (asked once per step, before its all-reduce)."""
        self.steps += 1
        if self.interval_s is None or self.last_save_t is None:
            return self.steps >= FIRST_SAVE_STEPS
        return (now if now is not None else time.time()) - self.last_save_t >= self.interval_s

    def saved(self, cost_s: float, step_s: float | None, step: int) -> None:
        """A save took `cost_s` of the loop's time: the interval is chosen again."""
        self.costs = [*self.costs, cost_s][-COSTS_KEPT:]
        self.last_save_t = time.time()
        cost = statistics.median(self.costs)
        self.interval_s = young_daly_s(max(cost, 1e-6), self.mtbf_s)
        if self.out is not None:
            write_atomic(self.out, json.dumps(self.described(cost, step_s, step), indent=1),
                         sync=False)

    def described(self, cost: float, step_s: float | None, step: int) -> dict[str, object]:
        assert self.interval_s is not None
        return {"interval_s": round(self.interval_s, 3),
                "every_steps": round(self.interval_s / step_s, 1) if step_s else None,
                "formula": "sqrt(2 x save cost x MTBF) (Young/Daly)",
                "save_cost_s": round(cost, 4), "save_cost_from": f"median of the last "
                f"{len(self.costs)} saves' time in the training loop (measured, rank 0)",
                "mtbf_s": round(self.mtbf_s, 1), "mtbf_from": self.mtbf_from,
                "step_s": round(step_s, 4) if step_s else None, "at_step": step,
                "costs_s": [round(c, 4) for c in self.costs], "basis": "measured"}


def say(d: dict[str, object]) -> str:
    """One line for the operator: the interval and each of its inputs."""
    every = f" (about every {d['every_steps']} steps)" if d.get("every_steps") else ""
    return (f"checkpoint every {d['interval_s']} s{every} = sqrt(2 x save cost "
            f"{d['save_cost_s']} s x MTBF {d['mtbf_s']} s); save cost: {d['save_cost_from']}; "
            f"MTBF: {d['mtbf_from']}; --ckpt-every N sets it instead")
