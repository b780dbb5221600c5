"""Certification: probes on the digital twin or real hardware, the staged ladder, verdicts
against spec and fleet baselines, topology-aware fault localization, findings.

Names are loaded lazily (PEP 562) so `rackscale.certify.torch_backend` and the probes import
on a bare GPU machine that has torch and numpy but not the store's SQLAlchemy or pydantic.
"""

from __future__ import annotations

from rackscale.lazy import lazy_exports

_EXPORTS = {
    "TwinBackend": "backends", "Campaign": "campaign", "ProbeFailed": "campaign",
    "ComponentResult": "findings", "Finding": "findings", "store_run": "findings",
    "twin_plant": "findings", "FindingsFilter": "findings", "stage_label": "findings",
    "write_jsonl": "findings", "CertifyRun": "ladder", "Ladder": "ladder", "Backend": "measure",
    "Groups": "measure", "Measurement": "measure", "Scope": "measure", "Timed": "measure",
    "PROBES": "probes", "Probe": "probes", "ProbeRegistry": "probes", "UnknownProbe": "probes",
    "LadderConfig": "state", "LadderConfigError": "state", "THRESHOLDS": "verdict",
    "Baseline": "verdict", "Thresholds": "verdict", "fleet_baseline": "verdict",
    "judge": "verdict", "TorchBackend": "torch_backend", "STAGE_NAMES": "stages",
    "UnknownStage": "stages", "parse_stages": "stages",
    "SHARED_CPU_THRESHOLDS": "verdict", "RunnerBackend": "runners", "LocalRunner": "runners",
    "Placement": "runners", "RankPlace": "runners", "Runner": "runners",
    "RunnerError": "runners",
    "loopback_placement": "runners", "placement_from_places": "runners",
    "SlurmRunner": "runners.slurm", "slurm_nodes": "runners.slurm",
    "gpu_gres": "runners.slurm", "CampaignPlan": "plan", "PlannedBatch": "plan",
    "plan_campaign": "plan", "K8sOptions": "k8s", "K8sPlanError": "k8s",
    "render_manifests": "k8s", "validate_manifests": "k8s",
    "DOWN_REL": "state", "Judgement": "verdict", "repeat_median": "verdict",
    "DEFAULT_TWIN_SEED": "service", "DEMO_FAULTS": "service", "DemoFaultsMismatch": "service",
    "LadderProgress": "service", "TwinRunRequest": "service", "record_run": "service",
    "run_on_twin": "service", "twin_faults": "service",
}
__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
