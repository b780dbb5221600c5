"""`rackscale demo`: the main job on the embedded defaults (SQLite under ./rackscale-data/).

The demo is a list of steps run in order over one `DemoContext`; each room adds its step to
STEPS: fleet + inventory -> lifecycle onboarding -> certification -> triage -> checkpoint
save/restore -> simulation -> report. A step reads what earlier steps left in `ctx.results`
(one typed result per step) or in the store. `DemoContext`, `Step` and the step results live
in `cli/_pipeline.py`, which the noun modules import (this module imports them, so they must
not import it).
"""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rackscale.cli._common import DbOption, console, err_console, seed_option
from rackscale.cli._pipeline import DemoContext, FleetStepResult, Step
from rackscale.cli.certify import step_certify
from rackscale.cli.checkpoint import step_checkpoint
from rackscale.cli.fleet import print_summary
from rackscale.cli.lifecycle import step_onboarding, step_triage
from rackscale.cli.report import step_report
from rackscale.cli.simulate import step_simulate
from rackscale.errors import UserError
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import DEFAULT_DATA_DIR, Store, load_topology


def step_fleet(ctx: DemoContext) -> None:
    result = load_topology(ctx.store, ctx.topo, actor="demo", reason="rackscale demo")
    summary = ctx.topo.summary()
    print_summary(summary)
    state = "loaded" if result.changed else "already loaded (no change)"
    console.print(f"inventory: {result.total_components} components {state} in "
                  f"{ctx.store.safe_url}")
    ctx.results.fleet = FleetStepResult(summary=summary, load=result)


STEPS: list[Step] = [
    Step("fleet", "fleet model and inventory", step_fleet),
    Step("lifecycle-onboarding", "lifecycle onboarding (cooling verified before power)",
         step_onboarding),
    Step("certify", "certification ladder on the digital twin", step_certify),
    Step("lifecycle-triage", "lifecycle triage: findings -> triage, passing -> production",
         step_triage),
    Step("checkpoint", "tiered checkpoint save and restore", step_checkpoint),
    Step("simulate", "simulated 30-day training job under failures", step_simulate),
    Step("report", "usable-capacity report", step_report),
]


# A second demo in the same directory waits this long for the first (a demo takes well under a
# minute) before it gives up with a message.
DEMO_LOCK_WAIT_S = 600.0


@contextmanager
def _one_demo_at_a_time(data_dir: Path, wait_s: float = DEMO_LOCK_WAIT_S) -> Iterator[None]:
    """Demos in one directory share its database, plant file and checkpoint tiers; they run
    one after the other (an flock, released by the kernel even on kill -9)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / ".demo.lock", "a+") as fh:
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise UserError(f"another `rackscale demo` has held {data_dir} for over "
                                    f"{wait_s:g} s; wait for it to finish or stop it") from None
                if not told:
                    err_console.print(f"another `rackscale demo` is running in {data_dir}; "
                                      "waiting for it to finish", highlight=False)
                    told = True
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def demo(
    db: str | None = DbOption,
    seed: int = seed_option(7, "the digital twin, the checkpoint data and the simulation"),
) -> None:
    """Run the main job on the seed fleet, on the embedded defaults."""
    t0 = time.perf_counter()
    data_dir = Path(DEFAULT_DATA_DIR)
    with _one_demo_at_a_time(data_dir):
        ctx = DemoContext(topo=Topology.build(seed_fleet("seed-504")), store=Store(db),
                          seed=seed, data_dir=data_dir)
        for n, (_name, title, step) in enumerate(STEPS, 1):
            console.rule(f"[bold]{n}. {title}")
            step(ctx)
    console.print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s (seed {seed})")
