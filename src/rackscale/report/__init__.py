"""Usable-capacity ledger and report: what survives of the headline GPU count.

Reads the store only (inventory + event log, docs/contracts.md); writes report.json
(validated by report.schema.json) and a self-contained report.html.
"""

from rackscale.report.build import BuiltReport, build_report, report_document
from rackscale.report.diff import ReportDiffError, diff_documents
from rackscale.report.document import (
    SCHEMA_VERSION,
    build_document,
    report_schema,
    validate_document,
)
from rackscale.report.ledger import JobShape, JobShapeError, Ledger, Step, build_ledger
from rackscale.report.page import render_html
from rackscale.report.reasons import REASONS, describe
from rackscale.report.rules import FAULT_RULES, FaultRule, rule_for
from rackscale.report.states import RACK_STATES, TRAY_STATES
from rackscale.report.storeview import ReportInputError, StoreView, collect

__all__ = [
    "FAULT_RULES",
    "RACK_STATES",
    "REASONS",
    "SCHEMA_VERSION",
    "TRAY_STATES",
    "BuiltReport",
    "FaultRule",
    "JobShape",
    "JobShapeError",
    "Ledger",
    "ReportDiffError",
    "ReportInputError",
    "Step",
    "StoreView",
    "build_document",
    "build_ledger",
    "build_report",
    "collect",
    "describe",
    "diff_documents",
    "render_html",
    "report_document",
    "report_schema",
    "rule_for",
    "validate_document",
]
