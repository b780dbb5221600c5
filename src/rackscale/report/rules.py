"""How each certification finding changes the ledger: one explicit rule per fault kind.

A finding names a component and a fault kind (docs/formats.md). Its blast radius is the fleet
model's `Topology.affected_gpus(component)`; the rule says what happens to those GPUs:

- `remove`: they leave the healthy set (a dead, slow or corrupting GPU holds back every
  synchronous job it joins; a GPU without its scale-out NIC cannot join a multi-rack job).
- `domain`: the GPUs stay healthy one by one, but their NVLink domain is not fully healthy
  (one switch tray of nine down costs every GPU of the domain NVLink bandwidth).
- `degrade`: the GPUs stay healthy and are flagged (a degraded leaf still carries traffic at
  reduced bandwidth; a power shelf is one of several feeding an N+1 bus bar).

A finding with verdict `warn` never removes capacity: it is downgraded to `degrade`, because
certification judged it within tolerance. An intermittent (`flapping`) finding takes the rule
of the fault it flaps (`evidence.of` or `of`); a kind this table does not know is treated as
`remove` and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rackscale.store import CertifyFindingV1

Action = Literal["remove", "domain", "degrade"]


@dataclass(frozen=True, slots=True)
class FaultRule:
    action: Action
    why: str


FAULT_RULES: dict[str, FaultRule] = {
    "gpu_dead": FaultRule("remove", "the GPU does not run"),
    "slow_gpu": FaultRule("remove", "a straggler slows every synchronous job it joins"),
    "hbm_degraded": FaultRule("remove", "memory errors or bandwidth loss on the GPU"),
    "sdc": FaultRule("remove", "silent data corruption: results cannot be trusted"),
    "nvlink_port_down": FaultRule("remove", "the GPU cannot join its NVLink domain"),
    "nvlink_switch_down": FaultRule("domain", "the domain loses a ninth of NVLink bandwidth"),
    "nvlink_switch_degraded": FaultRule("domain", "the domain's NVLink runs below spec"),
    "bad_cable": FaultRule("remove", "the GPU's scale-out link is below spec"),
    "nic_dead": FaultRule("remove", "the GPU has no scale-out link"),
    "leaf_degraded": FaultRule("degrade", "the leaf carries traffic at reduced bandwidth"),
    "leaf_down": FaultRule("remove", "the GPUs on this leaf lose their rail"),
    "coolant_flow_low": FaultRule("remove", "the whole rack throttles thermally"),
    "power_shelf_down": FaultRule("degrade", "other shelves carry the bus bar (N+1)"),
}

UNKNOWN_RULE = FaultRule("remove", "fault kind unknown to the report: counted out to be safe")


def rule_for(finding: CertifyFindingV1) -> tuple[str, FaultRule]:
    """(effective kind, rule) of one finding, before the verdict downgrade. A flapping
    finding names the fault it flaps between in `of` (a key of its own or of its evidence)."""
    kind = finding.kind
    if kind == "flapping":
        of = (finding.model_extra or {}).get("of") or finding.evidence.get("of")
        if isinstance(of, str) and of in FAULT_RULES:
            base = FAULT_RULES[of]
            return of, FaultRule(base.action, f"intermittent {of}: {base.why}")
        return kind, FaultRule("remove", "intermittent fault of unknown kind")
    return kind, FAULT_RULES.get(kind, UNKNOWN_RULE)


def effective_action(rule: FaultRule, verdict: str | None) -> Action:
    if verdict == "warn":
        return "degrade"
    return rule.action
