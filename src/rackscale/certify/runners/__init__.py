"""Runners: where the ladder's ranks run (one per GPU) and how a batch of tests is spread over
them. `LocalRunner` (processes on this host, or in the lab's namespaces) and `SlurmRunner`
(tasks through srun on the nodes that hold the GPUs), both behind `RunnerBackend`."""

from rackscale.certify.runners.backend import RunnerBackend
from rackscale.certify.runners.base import (
    NVLINK,
    SCALEOUT,
    Placement,
    RankPlace,
    Result,
    Runner,
    RunnerError,
    loopback_placement,
    placement_from_places,
)
from rackscale.certify.runners.local import LocalRunner

__all__ = ["NVLINK", "SCALEOUT", "LocalRunner", "Placement", "RankPlace", "Result", "Runner",
           "RunnerBackend", "RunnerError", "loopback_placement",
           "placement_from_places"]
