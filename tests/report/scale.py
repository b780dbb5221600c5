"""A large fleet's report without writing it to a store first: the StoreView a store read
would give (every rack and tray onboarded, a sprinkle of faults, results, one simulation),
built in memory so a layout test at 128k GPUs takes seconds, not the minutes a 1.3M-row
inventory load takes. The store read itself is covered at seed scale and benchmarked at 128k
(bench/bench_report.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rackscale.fleet import GPU, Topology, synthetic_fleet
from rackscale.report import build_document, build_ledger
from rackscale.report.storeview import StoreView
from rackscale.store import Event

from .events import trays_of

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _event(seq: int, cid: str, kind: str, payload: dict[str, Any], actor: str) -> Event:
    return Event(seq=seq, time=T0, component_id=cid, kind=kind, payload=payload, actor=actor,
                 reason="")


def scale_view(racks: int) -> StoreView:
    topo = Topology.build(synthetic_fleet(racks))
    faults: list[tuple[str, str]] = []
    for i, rack in enumerate(topo.racks):
        if i % 8 == 0:
            faults.append((f"{rack.id}/c05/gpu1", "slow_gpu"))
        if i % 16 == 3:
            faults.append((f"{rack.id}/s02", "nvlink_switch_down"))
    maintenance = {r.id for i, r in enumerate(topo.racks) if i % 97 == 5}
    return memory_view(topo, faults, maintenance)


# a fault on a tray-level part fails its tray; on a rack's shared part, the rack (contract)
TRAY_LEVEL = frozenset({"slow_gpu", "gpu_dead", "sdc", "hbm_degraded", "nvlink_port_down",
                        "bad_cable", "nic_dead"})


def memory_view(topo: Topology, faults: list[tuple[str, str]],
                maintenance: set[str] = frozenset()) -> StoreView:  # type: ignore[assignment]
    """The StoreView of a store where every rack and tray was onboarded to production (the
    racks in `maintenance` then went there), one certification run found `faults`
    (component, kind) and one simulation ran."""
    seq = iter(range(1, 10**9))
    view = StoreView(store_url="memory://scale", topo=topo, fleet_event=None,
                     inventory_gpus=set(topo.gpu_ids),
                     inventory_counts={GPU: len(topo.gpu_ids)})
    for rack in topo.racks:
        state = "maintenance" if rack.id in maintenance else "production"
        view.states[rack.id] = _event(next(seq), rack.id, "lifecycle.transition",
                                      {"from": "certified", "to": state}, "lifecycle")
        for tray in trays_of(topo, rack.id):
            view.states[tray] = _event(next(seq), tray, "lifecycle.transition",
                                       {"from": "burn_in", "to": "production"}, "lifecycle")
    view.lifecycle_events = sorted(view.states.values(), key=lambda e: e.seq)[-200:]
    view.lifecycle_counts = {"lifecycle.transition": len(view.states)}
    run = {"run_id": "c-big", "backend": "twin", "seed": 1, "stages": [1, 2, 3, 4]}
    view.findings = [_event(next(seq), cid, "certify.finding", {
        "component": cid, "kind": kind, "verdict": "fail", "stage": 1, "confidence": 0.95,
        "evidence": {"value": 30.1}, "run_id": "c-big", "backend": "twin"}, "certify")
        for cid, kind in faults]
    bad_trays = {"/".join(cid.split("/")[:3]) for cid, kind in faults if kind in TRAY_LEVEL}
    bad_racks = {"/".join(cid.split("/")[:2]) for cid, kind in faults
                 if kind not in TRAY_LEVEL}
    for rack in topo.racks:
        for tray in trays_of(topo, rack.id):
            ok = tray not in bad_trays
            view.results.append(_event(next(seq), tray, "certify.result", {
                "run_id": "c-big", "verdict": "pass" if ok else "fail",
                "stages_passed": [1, 2] if ok else []}, "certify"))
        ok = rack.id not in bad_racks
        view.results.append(_event(next(seq), rack.id, "certify.result", {
            "run_id": "c-big", "verdict": "pass" if ok else "fail",
            "stages_passed": [1, 2, 3, 4] if ok else [1]}, "certify"))
    view.certify_run = _event(next(seq), topo.spec.name, "certify.run", run, "certify")
    view.simulate_run = _event(next(seq), topo.spec.name, "simulate.run", {
        "simulated": True, "run_id": "sim-big", "fleet": topo.spec.name, "job_gpus": 65536,
        "days": 30, "trials": 50, "seed": 1, "failure_model": "llama3",
        "ckpt_interval_min": 30.0, "ettr": {"mean": 0.9, "ci95": 0.01},
        "goodput": {"total": 0.36}}, "simulate")
    view.last_seq = next(seq) - 1
    return view


def scale_document(racks: int) -> dict[str, Any]:
    view = scale_view(racks)
    return build_document(view, build_ledger(view))
