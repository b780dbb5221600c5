"""Reason codes of the ledger: every GPU a step drops carries one, and the report explains it.

Codes are `name` or `name:detail` (the detail is a lifecycle state, a fault kind or a verdict).
"""

from __future__ import annotations

from enum import StrEnum

from rackscale.report.rules import FAULT_RULES
from rackscale.report.states import RACK_STATES, TRAY_STATES


class Reason(StrEnum):
    """A ledger reason code; its value is the code as stored and shown, its meaning says why."""

    FLEET_SPEC = "fleet_spec"
    INVENTORY = "inventory"
    NOT_IN_INVENTORY = "not_in_inventory"
    LIFECYCLE = "lifecycle"
    NO_LIFECYCLE_DATA = "no_lifecycle_data"
    RACK_NOT_ONBOARDED = "rack_not_onboarded"
    RACK_STATE = "rack_state"
    TRAY_STATE = "tray_state"
    UNKNOWN_RACK_STATE = "unknown_rack_state"
    UNKNOWN_TRAY_STATE = "unknown_tray_state"
    CERTIFY_FINDINGS = "certify_findings"
    CERTIFY_NOT_RUN = "certify_not_run"
    FINDING = "finding"
    NVLINK_DOMAINS = "nvlink_domains"
    DOMAIN_PARTIAL = "domain_partial"
    DOMAIN_DEGRADED = "domain_degraded"
    CERTIFY_RESULTS = "certify_results"
    SHAPE_TOO_SMALL = "shape_too_small"
    SHAPE_REMAINDER = "shape_remainder"
    NO_CERTIFY_RESULT = "no_certify_result"
    DOMAIN_VERDICT = "domain_verdict"
    STAGE_NOT_PASSED = "stage_not_passed"
    SIMULATED_GOODPUT = "simulated_goodput"
    SIMULATE_NOT_RUN = "simulate_not_run"
    SIMULATE_INVALID = "simulate_invalid"
    SIMULATE_OTHER_FLEET = "simulate_other_fleet"
    GOODPUT_LOSS = "goodput_loss"

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]

    def of(self, detail: object) -> str:
        """The code with its detail (`rack_state:maintenance`)."""
        return f"{self.value}:{detail}"

_MEANINGS: dict[Reason, str] = {
    Reason.FLEET_SPEC: "GPUs the fleet spec describes (the headline count)",
    Reason.INVENTORY: "GPU rows of the store's inventory",
    Reason.NOT_IN_INVENTORY: "in the fleet spec but not in the inventory",
    Reason.LIFECYCLE: "latest lifecycle.transition state of each rack and tray",
    Reason.NO_LIFECYCLE_DATA: "no lifecycle events: the count is carried through unverified",
    Reason.RACK_NOT_ONBOARDED: "the rack has no lifecycle state while others do",
    Reason.RACK_STATE: "the rack's lifecycle state is not powered and in service",
    Reason.TRAY_STATE: "the tray's lifecycle state keeps it out of service",
    Reason.UNKNOWN_RACK_STATE: "a rack state the report does not know (counted out)",
    Reason.UNKNOWN_TRAY_STATE: "a tray state the report does not know (counted out)",
    Reason.CERTIFY_FINDINGS: "findings of the latest certify.run, by fault-kind rule",
    Reason.CERTIFY_NOT_RUN: "no certify.run events: the count is carried through unverified",
    Reason.FINDING: "a finding of the latest certification run hits these GPUs",
    Reason.NVLINK_DOMAINS: "NVLink domains whose every GPU is healthy",
    Reason.DOMAIN_PARTIAL: "another GPU of the same NVLink domain is not healthy",
    Reason.DOMAIN_DEGRADED: "a domain-wide finding (NVLink switch) degrades the domain",
    Reason.CERTIFY_RESULTS: "certify.result of each domain for the job shape's stages",
    Reason.SHAPE_TOO_SMALL: "the NVLink domain is smaller than the job shape needs",
    Reason.SHAPE_REMAINDER: "GPUs left over after whole job-shape units",
    Reason.NO_CERTIFY_RESULT: "the latest certification run has no result for this domain",
    Reason.DOMAIN_VERDICT: "the domain's certification verdict is not pass",
    Reason.STAGE_NOT_PASSED: "the domain did not pass a stage the job shape needs",
    Reason.SIMULATED_GOODPUT: "certified GPUs x simulated goodput (latest simulate.run)",
    Reason.SIMULATE_NOT_RUN: "no simulate.run events: the count is carried through",
    Reason.SIMULATE_INVALID: "the simulate.run event has no goodput in [0, 1]",
    Reason.SIMULATE_OTHER_FLEET: "the only simulate.run is of another fleet: not applied, the "
                                 "count is carried through",
    Reason.GOODPUT_LOSS: "time lost to failures, restarts and checkpoints (simulated)",
}
REASONS: dict[str, str] = {r.value: r.meaning for r in Reason}


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
