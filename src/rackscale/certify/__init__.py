"""Certification: probes on the digital twin or real hardware, the staged ladder, verdicts
against spec and fleet baselines, topology-aware fault localization, findings."""

from rackscale.certify.backends import TwinBackend
from rackscale.certify.campaign import Campaign, ProbeFailed
from rackscale.certify.findings import ComponentResult, Finding, store_run, write_jsonl
from rackscale.certify.ladder import CertifyRun, Ladder
from rackscale.certify.measure import Backend, Groups, Measurement, Scope, Timed
from rackscale.certify.probes import PROBES, Probe, ProbeRegistry, UnknownProbe
from rackscale.certify.state import LadderConfig, LadderConfigError
from rackscale.certify.verdict import THRESHOLDS, Baseline, Thresholds, fleet_baseline, judge

__all__ = [
    "PROBES", "THRESHOLDS", "Backend", "Baseline", "Campaign", "CertifyRun", "ComponentResult",
    "Finding", "Groups", "Ladder", "LadderConfig", "LadderConfigError", "Measurement", "Probe",
    "ProbeFailed", "ProbeRegistry", "Scope", "Thresholds", "Timed", "TwinBackend",
    "UnknownProbe", "fleet_baseline", "judge", "store_run", "write_jsonl",
]
