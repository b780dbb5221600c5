"""A scrape into the store: findings as `certify.finding` events of stage `telemetry`, and each
tray's counters as `telemetry.counters` when they changed. One batch per scrape.

Findings are recorded as certification's are, so the fleet state folds them the same way (a
failing one makes its tray's or rack's certification false) and the lifecycle acts on them the
same way (triage, the Slurm drain, the return on a newer passing certification): nothing in
the lifecycle knows telemetry. Each scrape is its own run (`run_id` telemetry-...).

Nothing is recorded twice: a finding whose identity (component and `evidence.key`: the Xid,
the ECC count, the counter's value) is already on record is recorded again only once a
passing certification of its tray or rack is newer than it (the part was repaired and
re-certified, and the exporter still or again reports it). Counters are recorded only when
they differ from the tray's last recorded ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rackscale.fleet import Topology
from rackscale.state import FleetState
from rackscale.store import (
    CertifyFindingV1,
    Kind,
    NewEvent,
    Store,
    TelemetryCountersV1,
)
from rackscale.telemetry.dcgm import Page
from rackscale.telemetry.evaluate import (
    STAGE,
    Context,
    Counters,
    Evaluation,
    evaluate_page,
    node_hosts,
)


@dataclass(slots=True)
class ScrapeReport:
    run_id: str
    sources: list[str]
    findings: list[dict[str, Any]] = field(default_factory=list)  # recorded by this scrape
    repeated: int = 0  # findings already on record, not written again
    skipped: list[dict[str, Any]] = field(default_factory=list)
    noted: list[dict[str, Any]] = field(default_factory=list)
    gpus: int = 0
    counters_recorded: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "sources": self.sources, "gpus": self.gpus,
                "findings": self.findings, "repeated": self.repeated,
                "skipped": self.skipped, "noted": self.noted,
                "counters_recorded": self.counters_recorded}


def baselines(store: Store) -> dict[str, Counters]:
    """Each tray's newest recorded counters."""
    out: dict[str, Counters] = {}
    for ev in store.events(kind=Kind.TELEMETRY_COUNTERS):
        out[ev.component_id] = ev.read(TelemetryCountersV1).counters
    return out


def _on_record(store: Store) -> dict[tuple[str, str], int]:
    """(component, evidence key) -> seq of the newest telemetry finding with that identity."""
    out: dict[tuple[str, str], int] = {}
    for ev in store.events_with(Kind.CERTIFY_FINDING, "stage", STAGE):
        p = ev.read(CertifyFindingV1)
        key = p.evidence.get("key")
        if isinstance(key, str):
            out[(p.component, key)] = ev.seq
    return out


def _floor(state: FleetState, topo: Topology, component: str) -> int:
    """Seq of the passing certification a repeat must be newer than (0: none passes)."""
    holder = topo.holder(component)
    part = holder.tray or holder.rack or component
    cert = state.certification(part)
    return cert.seq if cert is not None and cert.ok else 0


def _merge(evals: list[Evaluation]) -> Evaluation:
    out = Evaluation()
    for e in evals:
        out.findings += e.findings
        out.skipped += e.skipped
        out.noted += e.noted
        for tray, (host, counters) in e.counters.items():
            out.counters.setdefault(tray, (host, {}))[1].update(counters)
    return out


def scrape(store: Store, topo: Topology, pages: list[Page], *,
           hosts: Mapping[str, str] | None = None,
           cooling: Mapping[str, Mapping[str, Any]] | None = None,
           state: FleetState | None = None) -> ScrapeReport:
    """Read `pages` against the fleet and record what is new (see the module). `hosts`:
    exporter Hostname -> tray id (default: the Slurm node names); `cooling`: the racks under
    the lifecycle's coolant response now; `state` is refreshed here (a watch keeps one)."""
    run_id = f"telemetry-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    rep = ScrapeReport(run_id=run_id, sources=[p.source for p in pages],
                       gpus=sum(len(p.gpus) for p in pages))
    before = baselines(store)
    ctx = Context(topo=topo, hosts=hosts if hosts is not None else node_hosts(topo),
                  baselines=before, cooling=cooling or {})
    ev = _merge([evaluate_page(p, ctx) for p in pages])
    rep.skipped, rep.noted = ev.skipped, ev.noted
    state = state if state is not None else FleetState(topo)
    state.refresh(store)
    known = _on_record(store)
    events: list[NewEvent] = []
    now: set[tuple[str, str]] = set()  # two pages of one scrape may name one finding
    for f in ev.findings:
        identity = (f.component, f.evidence.key)
        if identity in now or known.get(identity, -1) > _floor(state, topo, f.component):
            rep.repeated += 1
            continue
        now.add(identity)
        rep.findings.append(f.as_dict())
        events.append(NewEvent(component_id=f.component, kind=Kind.CERTIFY_FINDING,
                               actor="telemetry", reason=f"{f.evidence.field} from "
                               f"{f.evidence.source}", payload=CertifyFindingV1(
                                   run_id=run_id, backend="real", component=f.component,
                                   kind=f.kind, stage=STAGE, confidence=f.confidence,
                                   verdict=f.verdict,
                                   evidence=f.evidence.model_dump(exclude_none=True))))
    for tray, (host, counters) in sorted(ev.counters.items()):
        merged = {**before.get(tray, {}), **counters}
        if merged != before.get(tray):
            events.append(NewEvent(component_id=tray, kind=Kind.TELEMETRY_COUNTERS,
                                   actor="telemetry", payload=TelemetryCountersV1(
                                       source=", ".join(rep.sources), host=host,
                                       counters=merged)))
            rep.counters_recorded += 1
    store.append_events(events)
    return rep
