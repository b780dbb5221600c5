"""Runners: where the ladder's ranks run (one per GPU) and how a batch of tests is spread over
them. `LocalRunner` (processes on this host, or in the lab's namespaces) and `SlurmRunner`
(tasks through srun on the nodes that hold the GPUs), both behind `RunnerBackend`.

Names load lazily (PEP 562): `runners.fabric_env` and the rank agent import on a bare GPU
machine with torch only, without the fleet model behind the runners."""

from __future__ import annotations

from rackscale.lazy import lazy_exports

_EXPORTS = {
    "RunnerBackend": "backend", "NVLINK": "base", "SCALEOUT": "base", "Placement": "base",
    "RankPlace": "base", "Result": "base", "Runner": "base", "RunnerError": "base",
    "loopback_placement": "base", "placement_from_places": "base", "LocalRunner": "local",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
