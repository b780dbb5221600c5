"""Job recovery incidents and tiered checkpoints, as the API and /metrics serve them.

Incidents are the recovery supervisor's `recovery.incident` events in the store (every time in
them is measured). Checkpoints are not in the store: they are read from the tiers themselves,
through the same listing `rackscale checkpoint ls` prints, from the tiers config `serve` was
given (`--config FILE`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

from fastapi import APIRouter, Depends, Query, Request
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from rackscale.checkpoint import CkptState, Restorer, Tiers, load_config
from rackscale.checkpoint import listing_rows as checkpoint_rows  # the one rule (`ls`)
from rackscale.incidents import INCIDENT_PHASES_S, incident_row
from rackscale.server.api import ERRORS, LimitQ, OffsetQ, Page, page, snapshot
from rackscale.server.snapshot import Snapshot
from rackscale.store import Kind, RecoveryIncidentV1, Store

# Incident phase -> metric name part. Each is a histogram of that phase over every incident
# that has it (a phase an incident never reached, e.g. no restart without a spare, is absent).
INCIDENT_PHASES = {k: k.removesuffix("_s") for k in INCIDENT_PHASES_S}
# Seconds: sub-second detection up to an hour-long outage.
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
           3600.0)
# The tier states an RPO is measured to (from `staged`, when the training loop went on).
RPO_STATES = [s.value for s in CkptState if s is not CkptState.STAGED]
CHECKPOINT_TTL_S = 10.0  # tiers may be remote object stores: list them at most this often


def incidents(store: Store, snap: Snapshot) -> list[dict[str, Any]]:
    """Every incident up to the snapshot's event, newest first (memoized per snapshot, so the
    API and /metrics agree with the rest of the snapshot)."""

    def build(_snap: Snapshot) -> list[dict[str, Any]]:
        return [incident_row(e.read(RecoveryIncidentV1).dump(), seq=e.seq,
                             time=e.time.isoformat(), component=e.component_id)
                for e in store.events(kind=Kind.RECOVERY_INCIDENT, newest_first=True,
                                      until_seq=snap.seq)]

    rows: list[dict[str, Any]] = snap.derived("incidents", build)  # the memo holds Any
    return rows


# prometheus_client leaves floatToGoString unannotated: a float in, its exposition text out.
_go_float = cast(Callable[[float], str], floatToGoString)


def _histogram(values: list[float], key: list[str], fam: HistogramMetricFamily) -> None:
    counts = [sum(1 for v in values if v <= b) for b in BUCKETS]
    fam.add_metric(key, [(_go_float(b), c) for b, c in zip(BUCKETS, counts, strict=True)]
                   + [("+Inf", len(values))], sum_value=sum(values))


def incident_metrics(rows: list[dict[str, Any]]) -> Iterator[Any]:
    total = CounterMetricFamily("rackscale_incidents", "Job recovery incidents by symptom and "
                                "outcome", labels=["symptom", "outcome"])
    by: dict[tuple[str, str], int] = {}
    for r in rows:
        k = (str(r.get("symptom")), str(r.get("outcome", "resumed")))
        by[k] = by.get(k, 0) + 1
    for k, n in sorted(by.items()):
        total.add_metric(list(k), n)
    yield total
    yield from job_metrics(rows)
    symptoms = sorted({str(r.get("symptom")) for r in rows})
    for field, part in INCIDENT_PHASES.items():
        name = f"rackscale_incident_{part}_seconds"
        fam = HistogramMetricFamily(name, f"Job recovery {part.replace('_', ' ')} time per "
                                    "incident (measured)", labels=["symptom"])
        for sym in symptoms:
            values = [float(r[field]) for r in rows
                      if r.get(field) is not None and str(r.get("symptom")) == sym]
            if values:
                _histogram(values, [sym], fam)
        yield fam


def job_metrics(rows: list[dict[str, Any]]) -> Iterator[Any]:
    """Per supervised job: its incidents and when the newest was detected, for "a job in
    repeated recovery". The label is `job_name`: `job` is the scrape job's in Prometheus.
    Jobs are far fewer than racks; one with no incident has no series."""
    total = CounterMetricFamily("rackscale_job_incidents", "Recovery incidents per supervised "
                                "job", labels=["job_name"])
    last = GaugeMetricFamily("rackscale_job_last_incident_timestamp_seconds",
                             "When the job's newest incident was detected (Unix time, "
                             "measured on the supervisor's host)", labels=["job_name"])
    count: dict[str, int] = {}
    newest: dict[str, float] = {}
    for r in rows:
        job = str(r.get("job"))
        count[job] = count.get(job, 0) + 1
        at = r.get("detected_at")
        if at is not None:
            newest[job] = max(newest.get(job, float(at)), float(at))
    for job in sorted(count):
        total.add_metric([job], count[job])
        if job in newest:
            last.add_metric([job], newest[job])
    yield total
    yield last


class CheckpointSource:
    """The checkpoints of one tiers config, listed at most every CHECKPOINT_TTL_S."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        if path is not None:
            load_config(Path(path))  # a bad file is a start-up error, not a 500 later
        self._lock = threading.Lock()
        self._at = -CHECKPOINT_TTL_S
        self._last: dict[str, Any] = self._empty()

    def _empty(self) -> dict[str, Any]:
        return {"configured": self.path is not None, "checkpoints": [], "unreachable": {},
                "damaged": {}, "notes": [], "replicas": [], "listed_unix": None}

    def listed_at(self) -> float | None:
        """When the listing `get` returns was taken (it lists the tiers now if due)."""
        self.get()
        return self._at if self.path is not None else None

    def get(self) -> dict[str, Any]:
        if self.path is None:
            return self._last
        with self._lock:
            if time.monotonic() - self._at >= CHECKPOINT_TTL_S:
                tiers = Tiers(load_config(Path(self.path)))
                r = Restorer(tiers)
                notes: list[str] = []
                rows = checkpoint_rows(tiers, r, notes)
                rows.sort(key=lambda c: (c["step"] is None, -(c["step"] or 0), c["id"]))
                self._last = self._empty() | {"checkpoints": rows, "unreachable": r.unreachable,
                                              "damaged": r.bad_manifests, "notes": notes,
                                              "replicas": [t.name for t in tiers.replicas],
                                              "listed_unix": time.time()}
                self._at = time.monotonic()
            return self._last


def rpo_by_tier(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per tier state: seconds from `staged` to that state for the newest checkpoint (highest
    step) that reached it. `region` is the RPO proper (the node may die after that)."""
    out: dict[str, float] = {}
    for tier in RPO_STATES:
        for c in rows:  # newest first
            st = c.get("states") or {}
            if tier in st and "staged" in st:
                out[tier] = float(st[tier]) - float(st["staged"])
                break
    return out


def replication_lag(rows: list[dict[str, Any]], now: float) -> float:
    """Seconds the oldest checkpoint in the region that the other regions still lack has
    waited for them since it was staged (0 when the region's newest is replicated): what a
    loss of the region would cost beyond its own RPO. Only the checkpoints newer than the
    newest replicated one count (an older one that never made it is superseded)."""
    waiting = []
    for c in rows:  # newest first
        st = c.get("states") or {}
        if "replicated" in st:
            break
        if "region" in st and "staged" in st:
            waiting.append(float(st["staged"]))
    return max(0.0, now - min(waiting)) if waiting else 0.0


def last_by_tier(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per tier state (staged included): when the newest checkpoint (highest step) that
    reached it got there."""
    out: dict[str, float] = {}
    for tier in ["staged", *RPO_STATES]:
        for c in rows:  # newest first
            st = c.get("states") or {}
            if tier in st:
                out[tier] = float(st[tier])
                break
    return out


def with_tier_rpo(row: dict[str, Any]) -> dict[str, Any]:
    st = row.get("states") or {}
    rpo = {t: float(st[t]) - float(st["staged"]) for t in RPO_STATES
           if t in st and "staged" in st}
    return row | {"rpo_by_tier_s": rpo, "basis": "measured"}


def checkpoint_metrics(listing: dict[str, Any]) -> Iterator[Any]:
    g = GaugeMetricFamily("rackscale_checkpoint_rpo_seconds", "Staged to each tier state for "
                          "the newest checkpoint that reached it (measured)", labels=["tier"])
    for tier, s in rpo_by_tier(listing["checkpoints"]).items():
        g.add_metric([tier], s)
    yield g
    at = GaugeMetricFamily(
        "rackscale_checkpoint_last_timestamp_seconds", "When the newest checkpoint that "
        "reached each tier state reached it (Unix time, measured): its age is the data a "
        "loss would cost, even when uploads have stopped", labels=["tier"])
    for tier, t in last_by_tier(listing["checkpoints"]).items():
        at.add_metric([tier], t)
    yield at
    if listing.get("replicas") and listing.get("listed_unix") is not None:
        yield GaugeMetricFamily(
            "rackscale_checkpoint_replication_lag_seconds", "How long the oldest checkpoint "
            "in the region that the other regions lack has waited for them since it was "
            "staged (0: the newest is replicated; measured)",
            value=replication_lag(listing["checkpoints"], float(listing["listed_unix"])))
    yield GaugeMetricFamily("rackscale_checkpoints", "Committed checkpoints in the tiers",
                            value=len(listing["checkpoints"]))


# ------------------------------------------------------------------------------------ the API
router = APIRouter(prefix="/api/v1", responses=ERRORS)


class CheckpointPage(Page):
    configured: bool
    rpo_s: dict[str, float]
    # the oldest region checkpoint the other regions lack: seconds waited (None: no replica)
    replication_lag_s: float | None = None
    unreachable: dict[str, str]
    damaged: dict[str, dict[str, str]]
    notes: list[str]


@router.get("/incidents", summary="Job recovery incidents, newest first (paged)",
            response_model=Page)
def list_incidents(request: Request, snap: Snapshot = Depends(snapshot),
                   offset: int = OffsetQ, limit: int = LimitQ,
                   job: str | None = Query(None, max_length=200),
                   symptom: str | None = Query(None, max_length=32),
                   outcome: str | None = Query(None, max_length=32)) -> dict[str, Any]:
    rows = [r for r in incidents(request.app.state.store, snap)
            if (job is None or r.get("job") == job)
            and (symptom is None or r.get("symptom") == symptom)
            and (outcome is None or r.get("outcome") == outcome)]
    return page(rows, offset, limit)


@router.get("/checkpoints", summary="Checkpoints with their tier states and RPO per tier "
            "(paged)", response_model=CheckpointPage)
def list_checkpoints(request: Request, offset: int = OffsetQ,
                     limit: int = LimitQ) -> dict[str, Any]:
    listing = request.app.state.checkpoints.get()
    rows = [with_tier_rpo(c) for c in listing["checkpoints"]]
    return page(rows, offset, limit) | {
        "configured": listing["configured"], "rpo_s": rpo_by_tier(listing["checkpoints"]),
        "unreachable": listing["unreachable"], "damaged": listing["damaged"],
        "notes": listing["notes"],
        "replication_lag_s": replication_lag(listing["checkpoints"], listing["listed_unix"])
        if listing.get("replicas") and listing.get("listed_unix") is not None else None}
