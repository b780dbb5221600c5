"""`rackscale demo`: the main job on the embedded defaults (SQLite under ./rackscale-data/).

The demo is a list of steps run in order; each room adds its step here as it lands:
fleet + inventory -> lifecycle onboarding -> certification -> triage -> simulation -> report.
"""

from __future__ import annotations

import time

import typer

from rackscale.cli._common import DbOption, console
from rackscale.cli.fleet import print_summary
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store, load_topology


def demo(
    db: str | None = DbOption,
    seed: int = typer.Option(7, "--seed", help="Random seed of the digital twin."),
) -> None:
    """Run the main job on the seed fleet: build it, load the inventory, print the summary."""
    t0 = time.perf_counter()
    topo = Topology.build(seed_fleet("seed-504"))
    store = Store(db)
    result = load_topology(store, topo, actor="demo", reason="rackscale demo")
    console.rule("[bold]1. fleet")
    print_summary(topo.summary())
    state = "loaded" if result.changed else "already loaded (no change)"
    console.print(f"inventory: {result.total_components} components {state} in "
                  f"{store.safe_url}")
    console.print(f"\ndemo finished in {time.perf_counter() - t0:.1f} s (seed {seed})")
