"""Fleet simulator: goodput and ETTR of synchronous training jobs under failures (simulated).

`run(config, fleet)` returns a typed `SimResult` (fields in `rackscale.simresult`) and
`sweep(...)` a `SweepResult` (a `SweepPoint`, a result and its value, per value); both say
`simulated: true`. The model
is in `engine` (vectorised across Monte Carlo trials) and, written plainly for comparison, in
`simpy_ref`. Failure models (Llama 3 Table 5, Meta RSC) are in `models`.
"""

from rackscale.simresult import Goodput, MeanCI, SimResult
from rackscale.simulate.config import (
    FleetShape,
    Plan,
    SimConfig,
    SimulateError,
    make_config,
    plan,
)
from rackscale.simulate.engine import Tallies, simulate
from rackscale.simulate.models import (
    CAUSES,
    FAILURE_MODELS,
    STRAGGLER,
    Cause,
    FailureModel,
    UnknownFailureModel,
    failure_model,
    register,
)
from rackscale.simulate.recovery import (
    RecoveryFileError,
    incidents_from_file,
    measured_recovery,
    with_recovery,
)
from rackscale.simulate.report import payload, sweep_payload, write_csv, write_png
from rackscale.simulate.results import (
    SIMULATED,
    SWEEPS,
    SweepOptimum,
    SweepPoint,
    SweepResult,
    meta_ettr,
    renewal_ettr,
    run,
    summarize,
    sweep,
    young_daly,
)
from rackscale.simulate.storage import REGION_LOSS, StorageTimes, scale_fits
from rackscale.simulate.whatif import (
    SETUPS,
    SIMULATED_WHATIF,
    storage_figures,
    storage_whatif,
)

__all__ = [
    "CAUSES",
    "FAILURE_MODELS",
    "REGION_LOSS",
    "SETUPS",
    "SIMULATED",
    "SIMULATED_WHATIF",
    "STRAGGLER",
    "SWEEPS",
    "Cause",
    "FailureModel",
    "FleetShape",
    "Goodput",
    "MeanCI",
    "Plan",
    "RecoveryFileError",
    "SimConfig",
    "SimResult",
    "SimulateError",
    "StorageTimes",
    "SweepOptimum",
    "SweepPoint",
    "SweepResult",
    "Tallies",
    "UnknownFailureModel",
    "failure_model",
    "incidents_from_file",
    "make_config",
    "measured_recovery",
    "meta_ettr",
    "payload",
    "plan",
    "register",
    "renewal_ettr",
    "run",
    "scale_fits",
    "simulate",
    "storage_figures",
    "storage_whatif",
    "summarize",
    "sweep",
    "sweep_payload",
    "with_recovery",
    "write_csv",
    "write_png",
    "young_daly",
]
