"""Prometheus /metrics: read from the same snapshot as the API at scrape time.

Names follow Prometheus conventions: prefix rackscale_, base units, `_total` on counters, and no
label finer than a rack (a 128k-GPU fleet must not become 128k series per metric).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rackscale.lifecycle import SERVING_RACK_STATES
from rackscale.server.ops import CheckpointSource, checkpoint_metrics, incident_metrics, incidents
from rackscale.server.snapshot import Snapshot, SnapshotCache

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class FleetCollector:
    """The metrics of one snapshot. `render` is the only caller, under its lock, and sets
    `snap` first, so one scrape never mixes two snapshots."""

    def __init__(self, cache: SnapshotCache, checkpoints: CheckpointSource) -> None:
        self.cache, self.checkpoints = cache, checkpoints
        self.snap: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snap = self.snap or self.cache.get()
        gpus = GaugeMetricFamily("rackscale_gpus", "GPUs by the lifecycle state that decides "
                                 "whether a job can use them (their tray's, or their rack's "
                                 "when the rack does not serve), region and SKU",
                                 labels=["state", "region", "sku"])
        for (state, region, sku), n in sorted(snap.gpu_counts.items()):
            gpus.add_metric([state, region, sku], n)
        yield gpus
        racks = GaugeMetricFamily("rackscale_racks", "Racks by lifecycle state and region",
                                  labels=["state", "region"])
        rc = Counter((r["state"] or "unenrolled", r["region"]) for r in snap.racks)
        for (state, region), n in sorted(rc.items()):
            racks.add_metric([state, region], n)
        yield racks
        usable = GaugeMetricFamily(
            "rackscale_usable_gpus", "GPUs left after each step of the usable-capacity ledger "
            "(basis: measured, simulated or recorded)", labels=["step", "basis"])
        for step in snap.ledger.steps:
            usable.add_metric([step.key, str(step.basis)], float(step.count))
        yield usable
        rack_usable = GaugeMetricFamily("rackscale_rack_usable_gpus",
                                        "Usable GPUs of each rack", labels=["rack", "region"])
        for r in snap.racks:
            rack_usable.add_metric([r["id"], r["region"]], r["usable_gpus"])
        yield rack_usable
        yield from rack_state_metrics(snap)
        cond = GaugeMetricFamily(
            "rackscale_rack_condition", "Each rack's conditions in the fleet state: 1 true, "
            "0 false (unknown ones are left out). Certified false on a serving rack means its "
            "newest certification failed while it serves", labels=["rack", "region", "type"])
        for r in snap.racks:
            for c in snap.conditions.get(r["id"], []):
                if c["status"] != "Unknown":
                    cond.add_metric([r["id"], r["region"], c["type"]],
                                    1.0 if c["status"] == "True" else 0.0)
        yield cond
        findings = GaugeMetricFamily("rackscale_findings",
                                     "Findings of the latest certification run by fault kind",
                                     labels=["kind"])
        for kind, n in sorted(Counter(f["kind"] for f in snap.ledger.findings).items()):
            findings.add_metric([kind], n)
        yield findings
        yield CounterMetricFamily(
            "rackscale_lifecycle_transitions", "Lifecycle transitions recorded in the event log",
            value=snap.derived("transitions", lambda _s: self.cache.store.count_events(
                "lifecycle.transition")))
        yield GaugeMetricFamily("rackscale_event_seq", "Sequence number of the newest event",
                                value=snap.seq)
        yield GaugeMetricFamily("rackscale_snapshot_build_seconds",
                                "Time the last store snapshot took to build", value=snap.built_s)
        yield from incident_metrics(incidents(self.cache.store, snap))
        if self.checkpoints.path is not None:
            yield from checkpoint_metrics(self.checkpoints.get())


SERVING = frozenset(s.value for s in SERVING_RACK_STATES)


def rack_state_metrics(snap: Snapshot) -> Iterator[Metric]:
    """Each rack's lifecycle state as the fleet state has it at the snapshot's seq: one series
    per rack (its current state, value 1; a move makes the old series stale), and whether it
    serves jobs (the lifecycle room's serving states), so alert rules need not list them."""
    state = GaugeMetricFamily(
        "rackscale_rack_state", "Each rack's current lifecycle state in the fleet state "
        "(always 1; the state is the label)", labels=["rack", "region", "state"])
    serving = GaugeMetricFamily(
        "rackscale_rack_serving", "1 while the rack is in a state that serves jobs "
        f"({', '.join(sorted(SERVING))}), else 0", labels=["rack", "region"])
    for r in snap.racks:
        st = snap.rack_states.get(r["id"])
        if st is None:
            continue  # the fleet state does not know the rack (another fleet's snapshot)
        state.add_metric([r["id"], r["region"], st], 1.0)
        serving.add_metric([r["id"], r["region"]], 1.0 if st in SERVING else 0.0)
    yield state
    yield serving
    trays = GaugeMetricFamily(
        "rackscale_rack_trays", "Trays (HGX: nodes) of each rack by their own lifecycle state "
        "in the fleet state", labels=["rack", "region", "state"])
    for r in snap.racks:
        for st, n in sorted(snap.tray_states.get(r["id"], {}).items()):
            trays.add_metric([r["id"], r["region"], st], float(n))
    yield trays


class Metrics:
    """/metrics of a store: rendered once per snapshot and checkpoint listing, so a scrape
    between changes is a dictionary lookup (1,778 rack series take ~100 ms to render)."""

    def __init__(self, cache: SnapshotCache, checkpoints: CheckpointSource | None = None) -> None:
        self.cache = cache
        self.checkpoints = checkpoints or CheckpointSource(None)
        self.collector = FleetCollector(cache, self.checkpoints)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self._lock = threading.Lock()

    def render(self) -> bytes:
        with self._lock:
            snap = self.cache.get()
            listed_at = self.checkpoints.listed_at()  # lists the tiers when due
            kept = snap.memo.get("metrics")  # (listing time, body): only the latest
            if kept is not None and kept[0] == listed_at:
                body: bytes = kept[1]  # the memo holds Any; "metrics" is (listed_at, body)
                return body
            self.collector.snap = snap
            try:
                body = generate_latest(self.registry)
            finally:
                self.collector.snap = None
            snap.memo["metrics"] = (listed_at, body)
            return body
