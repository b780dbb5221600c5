"""Reason codes of the ledger: every GPU a step drops carries one, and the report explains it.

Codes are `name` or `name:detail` (the detail is a lifecycle state, a fault kind or a verdict).
"""

from __future__ import annotations

from rackscale.report.rules import FAULT_RULES
from rackscale.report.states import RACK_STATES, TRAY_STATES

REASONS: dict[str, str] = {
    "fleet_spec": "GPUs the fleet spec describes (the headline count)",
    "inventory": "GPU rows of the store's inventory",
    "not_in_inventory": "in the fleet spec but not in the inventory",
    "lifecycle": "latest lifecycle.transition state of each rack and tray",
    "no_lifecycle_data": "no lifecycle events: the count is carried through unverified",
    "rack_not_onboarded": "the rack has no lifecycle state while others do",
    "rack_state": "the rack's lifecycle state is not powered and in service",
    "tray_state": "the tray's lifecycle state keeps it out of service",
    "unknown_rack_state": "a rack state the report does not know (counted out)",
    "unknown_tray_state": "a tray state the report does not know (counted out)",
    "certify_findings": "findings of the latest certify.run, by fault-kind rule",
    "certify_not_run": "no certify.run events: the count is carried through unverified",
    "finding": "a finding of the latest certification run hits these GPUs",
    "nvlink_domains": "NVLink domains whose every GPU is healthy",
    "domain_partial": "another GPU of the same NVLink domain is not healthy",
    "domain_degraded": "a domain-wide finding (NVLink switch) degrades the domain",
    "certify_results": "certify.result of each domain for the job shape's stages",
    "shape_too_small": "the NVLink domain is smaller than the job shape needs",
    "shape_remainder": "GPUs left over after whole job-shape units",
    "no_certify_result": "the latest certification run has no result for this domain",
    "domain_verdict": "the domain's certification verdict is not pass",
    "stage_not_passed": "the domain did not pass a stage the job shape needs",
    "simulated_goodput": "certified GPUs x simulated goodput (latest simulate.run)",
    "simulate_not_run": "no simulate.run events: the count is carried through",
    "simulate_invalid": "the simulate.run event has no goodput in [0, 1]",
    "simulate_other_fleet": "the only simulate.run is of another fleet: not applied, the "
                            "count is carried through",
    "goodput_loss": "time lost to failures, restarts and checkpoints (simulated)",
}


def describe(code: str) -> str:
    name, _, detail = code.partition(":")
    base = REASONS.get(name, "unknown reason code")
    if not detail:
        return base
    if name == "rack_state" and detail in RACK_STATES:
        return f"{base}: {detail} ({RACK_STATES[detail].meaning})"
    if name == "tray_state" and detail in TRAY_STATES:
        return f"{base}: {detail} ({TRAY_STATES[detail].meaning})"
    if name == "finding" and detail in FAULT_RULES:
        return f"{base}: {detail} ({FAULT_RULES[detail].why})"
    return f"{base}: {detail}"
