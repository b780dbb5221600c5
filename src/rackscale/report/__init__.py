"""Usable-capacity ledger and report: what survives of the headline GPU count.

Reads the store only (inventory + event log, docs/contracts.md); writes report.json
(validated by report.schema.json) and a self-contained report.html.
"""

from rackscale.report.asof import StorePoint, StorePointError, document_at, resolve_point
from rackscale.report.build import BuiltReport, build_report, ledger_now, report_document
from rackscale.report.cost import check_price
from rackscale.report.diff import ReportDiffError, diff_documents
from rackscale.report.disclosure import DISCLOSURE_VERSION, disclosure_schema, validate_disclosure
from rackscale.report.document import (
    SCHEMA_VERSION,
    build_document,
    report_schema,
    validate_document,
)
from rackscale.report.evidence import EvidenceFacts, evidence_facts
from rackscale.report.ledger import JobShape, JobShapeError, Ledger, Step, build_ledger
from rackscale.report.page import render_html
from rackscale.report.page_fleet import fleet_groups
from rackscale.report.palette import (
    BASIS_STYLE,
    LOSS_COLOR,
    STATE_STYLE,
    basis_class,
    palette_css,
    state_class,
)
from rackscale.report.reasons import REASONS, describe
from rackscale.report.redact import load_redaction_key, redact_bundle, write_redaction_key
from rackscale.report.rules import FAULT_RULES, FaultRule, rule_for
from rackscale.report.sign import keygen, sign_bundle
from rackscale.report.statement import load_valid_report, stamp_page
from rackscale.report.states import RACK_STATES, TRAY_STATES
from rackscale.report.storeview import ReportInputError, StoreView, collect
from rackscale.report.verify import Verification, verify_bundle

__all__ = [
    "BASIS_STYLE",
    "DISCLOSURE_VERSION",
    "FAULT_RULES",
    "LOSS_COLOR",
    "RACK_STATES",
    "REASONS",
    "SCHEMA_VERSION",
    "STATE_STYLE",
    "TRAY_STATES",
    "BuiltReport",
    "EvidenceFacts",
    "FaultRule",
    "JobShape",
    "JobShapeError",
    "Ledger",
    "ReportDiffError",
    "ReportInputError",
    "Step",
    "StorePoint",
    "StorePointError",
    "StoreView",
    "Verification",
    "basis_class",
    "build_document",
    "build_ledger",
    "build_report",
    "check_price",
    "collect",
    "describe",
    "diff_documents",
    "disclosure_schema",
    "document_at",
    "evidence_facts",
    "fleet_groups",
    "keygen",
    "ledger_now",
    "load_redaction_key",
    "load_valid_report",
    "palette_css",
    "redact_bundle",
    "render_html",
    "report_document",
    "report_schema",
    "resolve_point",
    "rule_for",
    "sign_bundle",
    "stamp_page",
    "state_class",
    "validate_disclosure",
    "validate_document",
    "verify_bundle",
    "write_redaction_key",
]
