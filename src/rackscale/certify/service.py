"""Starting a certification run on the digital twin: the one policy `rackscale certify run
--backend twin` and the server's `POST /api/v1/certify/runs` both follow.

Which faults the twin applies (none unless asked; `demo` = the shipped demo faults), how the
twin is seeded, the ladder it runs, and how the run is stored (a `certify.run` event with its
findings and per-tray/rack results, in one transaction) are decided here, once. The front ends
only turn their options or body into a `TwinRunRequest` and show the result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rackscale.certify.backends import TwinBackend
from rackscale.certify.findings import store_run, twin_plant
from rackscale.certify.ladder import CertifyRun, Ladder
from rackscale.certify.state import LadderConfig
from rackscale.errors import UserError
from rackscale.faults import FaultsFile, TwinHardware, demo_faults_path, load_faults
from rackscale.fleet import Topology
from rackscale.store import Store

DEMO_FAULTS = "demo"  # the name both front ends give the shipped demo faults
DEFAULT_TWIN_SEED = 7

LadderProgress = Callable[[int, str], None]


class DemoFaultsMismatch(UserError):
    """The shipped demo faults name parts of the seed-504 fleet; another fleet lacks them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TwinRunRequest:
    """What a run on the twin is asked for. `faults`: a faults file, DEMO_FAULTS, or None
    for a clean run (no faults)."""

    config: LadderConfig = field(default_factory=LadderConfig)
    seed: int = DEFAULT_TWIN_SEED
    faults: str | None = None


def twin_faults(topo: Topology, faults: str | None) -> tuple[str | None, FaultsFile | None]:
    """(the faults file's path, its checked contents) for a request's `faults`."""
    if not faults:
        return None, None
    if faults != DEMO_FAULTS:
        return faults, load_faults(faults, topo)
    path = demo_faults_path()
    try:
        return path, load_faults(path, topo)
    except UserError as err:
        # Said in the user's words: the package's install path means nothing to them (and
        # the server must not show it to an API client).
        raise DemoFaultsMismatch(
            f"the shipped demo faults do not fit fleet {topo.spec.name} "
            f"({str(err).replace(path, 'demo faults')}); they are written for the seed-504 "
            "fleet. Fix: run without faults, or give a faults file of this fleet") from None


def run_on_twin(topo: Topology, req: TwinRunRequest,
                progress: LadderProgress | None = None) -> CertifyRun:
    """The ladder over `topo` on the digital twin, as `req` asks (nothing is stored)."""
    path, ff = twin_faults(topo, req.faults)
    backend = TwinBackend(TwinHardware(topo, ff, seed=req.seed))
    run = Ladder(topo, backend, req.config, seed=req.seed, faults_file=path).run(progress)
    run.plant = twin_plant(ff, path, req.seed)  # stored with the run: the twin's one plant
    return run


def record_run(store: Store, run: CertifyRun, actor: str = "certify") -> int:
    """Store a finished run (twin or real) the one way every reader expects."""
    return store_run(store, fleet=run.fleet, run=run.summary(), findings=run.findings,
                     results=run.results, actor=actor, plant=run.plant)
