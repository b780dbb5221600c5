"""GPU telemetry in: dcgm-exporter's Prometheus page read into findings on the fleet's GPUs,
trays and CDUs, recorded as certification's are so the lifecycle acts on them the same way."""

from rackscale.telemetry.dcgm import GpuTelemetry, Page, TelemetryError, parse_page, read_source
from rackscale.telemetry.evaluate import (
    STAGE,
    Context,
    Evaluation,
    TelemetryEvidence,
    TelemetryFinding,
    node_hosts,
    read_hosts,
)
from rackscale.telemetry.record import ScrapeReport, baselines, scrape
from rackscale.telemetry.watch import Cooling, Watch, scrape_sources
from rackscale.telemetry.xid import XIDS, Xid, classify

__all__ = [
    "STAGE",
    "XIDS",
    "Context",
    "Cooling",
    "Evaluation",
    "GpuTelemetry",
    "Page",
    "ScrapeReport",
    "TelemetryError",
    "TelemetryEvidence",
    "TelemetryFinding",
    "Watch",
    "Xid",
    "baselines",
    "classify",
    "node_hosts",
    "parse_page",
    "read_hosts",
    "read_source",
    "scrape",
    "scrape_sources",
]
