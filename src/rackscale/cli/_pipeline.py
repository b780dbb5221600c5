"""The demo's pipeline: the context its steps share, and the step type.

Kept apart from `cli/demo.py` so that the noun modules, which each define their room's demo
step, import this and not the demo (which imports them): no import circle between the demo and
every noun.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rackscale.fleet import Topology
from rackscale.lifecycle import Controller
from rackscale.store import Store


@dataclass(slots=True, kw_only=True)
class DemoContext:
    """What every step of one demo run shares: the topology (built once), the store, the seed,
    the data directory, and the one lifecycle controller of the run."""

    topo: Topology
    store: Store
    seed: int
    data_dir: Path
    # Step outputs by name ("fleet", "lifecycle", "certify", "checkpoint", "simulate",
    # "report").
    results: dict[str, Any] = field(default_factory=dict)
    # The lifecycle controller, built by the first lifecycle step and reused by the next, so
    # onboarding and triage drive the same plant through the same controller.
    controller: Controller | None = None


class Step(NamedTuple):
    name: str
    title: str
    run: Callable[[DemoContext], None]
