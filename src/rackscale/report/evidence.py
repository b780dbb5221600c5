"""A finding's evidence in words: what was measured, what was expected, in which unit, on
which basis (measured on hardware or simulated on the twin) and with what confidence.

The evidence of a `certify.finding` is a free-form dict (docs/formats.md); a reader wants its
headline, not its repr. `evidence_facts` picks the keys the probes write (`value`, `unit`,
`reference`, `baseline`, `fail_below_rel`, `repeats`...) and says the rest as `key value`
pairs, in full: nothing is cut mid-way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rackscale.provenance import MEASURED, SIMULATED, Provenance, basis_text
from rackscale.report import fmt

# Keys the headline already says (or that only say the basis) are left out of `detail`.
_HEADLINE_KEYS = frozenset({"simulated", "measured", "value", "unit", "reference", "baseline",
                            "fail_below_rel", "rel", "repeats", "repeats_failed_hard",
                            "repeats_wrong"})


@dataclass(frozen=True, slots=True)
class EvidenceFacts:
    measured: str  # the measured (or simulated) value with its unit, or what was observed
    expected: str  # the reference it is judged against, with the pass threshold
    unit: str
    basis: str  # "measured" or "simulated"
    basis_label: str  # the words for the basis (provenance.BASIS_TEXT)
    confidence: str  # "99 %"
    repeats: str  # "8 of 8 repeats failed"
    detail: str  # every other key, as "key value; key value"

    def as_dict(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in self.__slots__}


def _value(v: Any) -> str:
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(", ", ": "), default=str)
    return fmt.number(v)


def _basis(ev: dict[str, Any], backend: Any) -> str:
    if ev.get("measured") is True:
        return MEASURED
    if ev.get("simulated") is True:
        return SIMULATED
    return (Provenance.parse(backend) or Provenance.TWIN).basis


def evidence_facts(finding: dict[str, Any]) -> EvidenceFacts:
    """The facts of one finding (a row of the ledger's findings: `evidence`, `confidence`,
    `backend`)."""
    ev = finding.get("evidence") or {}
    if not isinstance(ev, dict):
        ev = {"evidence": ev}
    unit = str(ev.get("unit") or "")

    def with_unit(v: Any) -> str:
        return f"{fmt.number(v)} {unit}".strip()

    if "value" in ev:
        measured = with_unit(ev["value"])
        if isinstance(ev.get("rel"), int | float) and "reference" in ev:
            measured += f" ({float(ev['rel']):.1%} of the reference)"
    elif "repeats_wrong" in ev:
        measured = f"{fmt.number(ev['repeats_wrong'])} wrong results"
    else:
        measured = "—"
    expected_parts = []
    if "reference" in ev:
        expected_parts.append(with_unit(ev["reference"]))
    if ev.get("baseline"):
        expected_parts.append(f"({ev['baseline']})")
    if isinstance(ev.get("fail_below_rel"), int | float):
        expected_parts[-1:] = [f"{''.join(expected_parts[-1:])};"] if expected_parts else []
        expected_parts.append(f"fails below {float(ev['fail_below_rel']):.1%} of it")
    if "repeats_wrong" in ev and not expected_parts:
        expected_parts.append("every result correct")
    expected = " ".join(expected_parts) or "—"
    reps = ""
    failed = ev.get("repeats_failed_hard", ev.get("repeats_wrong"))
    if "repeats" in ev and failed is not None:
        reps = f"{fmt.number(failed)} of {fmt.number(ev['repeats'])} repeats failed"
    conf = finding.get("confidence")
    confidence = f"{float(conf):.0%}" if isinstance(conf, int | float) else str(conf or "—")
    detail = "; ".join(f"{k} {_value(v)}" for k, v in ev.items() if k not in _HEADLINE_KEYS)
    basis = _basis(ev, finding.get("backend"))
    return EvidenceFacts(measured=measured, expected=expected, unit=unit or "—", basis=basis,
                         basis_label=basis_text(basis), confidence=confidence, repeats=reps,
                         detail=detail)
