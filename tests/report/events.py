"""Contract events (docs/contracts.md) appended through `Store.append_event`, exactly as the
lifecycle, certify and simulate rooms append them, so the report is tested on the contract."""

from __future__ import annotations

from typing import Any

import numpy as np

from rackscale.fleet import COMPUTE_TRAY, NODE, Topology
from rackscale.store import NewEvent, Store

RACK_PATH = ["received", "cabled", "cooling_verified", "powered", "firmware", "burn_in",
             "certified", "production"]
TRAY_PATH = ["onboard", "seatrial", "burn_in", "production"]

# The shipped-faults flavour the demo uses: one of each rule (remove, domain, degrade, warn).
SEED_FAULTS: list[dict[str, Any]] = [
    {"component": "us-east/r02/c07/gpu3", "kind": "slow_gpu", "verdict": "fail",
     "stage": 1, "evidence": {"tflops": 30.8, "baseline": 35.0}, "confidence": 0.97},
    {"component": "us-west/r01/c03/nic2", "kind": "bad_cable", "verdict": "fail",
     "stage": 4, "evidence": {"busbw_gbps": 64.0, "peak": 160.0},
     "confidence": 0.9},
    {"component": "us-east/r04/s02", "kind": "nvlink_switch_down", "verdict": "fail",
     "stage": 3, "evidence": {"nvlink_busbw_tbps": 0.71}, "confidence": 0.99},
    {"component": "us-west/r03/cdu", "kind": "coolant_flow_low", "verdict": "fail",
     "stage": 2, "evidence": {"flow_lpm": 110.0, "required_lpm": 220.0},
     "confidence": 0.95},
    {"component": "us-east/leaf-rail1-0", "kind": "leaf_degraded", "verdict": "warn",
     "stage": 4, "evidence": {"busbw_ratio": 0.8}, "confidence": 0.7},
]


def trays_of(topo: Topology, rack_id: str) -> list[str]:
    rack = topo.racks[topo.rack_of[topo.index[rack_id]]]
    return [topo.ids[j] for j in range(rack.first, rack.end)
            if topo.kinds[j] in (COMPUTE_TRAY, NODE)]


def walk(store: Store, cid: str, path: list[str], *, actor: str = "lifecycle",
         start: str | None = None) -> None:
    prev = start
    events = []
    for to in path:
        events.append(NewEvent(component_id=cid, kind="lifecycle.transition",
                               payload={"from": prev, "to": to}, actor=actor,
                               reason=f"onboarding: {to}"))
        prev = to
    store.append_events(events)


def onboard(store: Store, topo: Topology, racks: list[str] | None = None,
            rack_to: str = "production", tray_to: str = "production") -> None:
    for rack in topo.racks:
        if racks is not None and rack.id not in racks:
            continue
        walk(store, rack.id, RACK_PATH[:RACK_PATH.index(rack_to) + 1])
        for tray in trays_of(topo, rack.id):
            walk(store, tray, TRAY_PATH[:TRAY_PATH.index(tray_to) + 1])


def certify(store: Store, topo: Topology, findings: list[dict[str, Any]], *,
            run_id: str = "c-0001", backend: str = "twin", seed: int = 7,
            stages: tuple[int, ...] = (1, 2, 3, 4),
            fail_racks: tuple[str, ...] = (), skip_racks: tuple[str, ...] = ()) -> None:
    """One certification run: its findings, a result per tray and per rack, then the run."""
    for f in findings:
        store.append_event(f["component"], "certify.finding",
                           f | {"run_id": run_id, "backend": backend}, actor="certify",
                           reason=f"{f['kind']} at stage {f['stage']}")
    bad_trays = set()
    bad_racks = set(fail_racks)
    for f in findings:
        if f["verdict"] != "fail":
            continue
        affected = topo.affected_gpus(f["component"])
        racks = {topo.racks[r].id for r in np.unique(topo.gpu_rack[affected]).tolist()}
        # As the contract says: a tray fails for a finding inside it, a rack only for its
        # shared parts (cdu, switch trays, power shelves), never for one bad tray.
        if f["component"] in racks or topo.holder(f["component"]).level == "rack":
            bad_racks |= racks
        else:
            bad_trays |= {topo.ids[t] for t in np.unique(topo.gpu_tray[affected]).tolist()}
    events = []
    for rack in topo.racks:
        if rack.id in skip_racks:
            continue
        for tray in trays_of(topo, rack.id):
            ok = tray not in bad_trays
            events.append(NewEvent(component_id=tray, kind="certify.result", actor="certify",
                                   payload={"run_id": run_id, "backend": backend,
                                            "verdict": "pass" if ok else "fail",
                                            "stages_passed": [1, 2] if ok else []}))
        ok = rack.id not in bad_racks
        events.append(NewEvent(component_id=rack.id, kind="certify.result", actor="certify",
                               payload={"run_id": run_id, "backend": backend,
                                        "verdict": "pass" if ok else "fail",
                                        "stages_passed": list(stages) if ok else [1]}))
    store.append_events(events)
    store.append_event(topo.spec.name, "certify.run", {
        "run_id": run_id, "backend": backend, "seed": seed, "faults_file": "faults/seed.yaml",
        "stages": list(stages), "collective_tests": 40, "allpairs_tests": 0, "campaign_s": 812.0,
        "gpus_total": len(topo.gpu_ids), "gpus_healthy": len(topo.gpu_ids) - 80,
        "findings": len(findings), "simulated" if backend == "twin" else "measured": True},
        actor="certify", reason="certification ladder")


def simulate(store: Store, topo: Topology, *, ettr: float = 0.93, job_gpus: int = 432,
             sweep: bool = True, run_id: str = "sim-0001") -> None:
    """A simulate.run shaped like the simulate room's `results.summarize` (means with CI
    half-widths, goodput split, infinite figures allowed) with a checkpoint-interval sweep."""
    payload: dict[str, Any] = {
        "simulated": True, "run_id": run_id, "fleet": topo.spec.name, "job_gpus": job_gpus,
        "days": 30, "trials": 200, "seed": 7, "failure_model": "llama3-405b",
        "ckpt_interval_min": 20.0, "ettr": {"mean": ettr, "ci95": 0.02},
        "goodput": {"scheduling": 0.99, "runtime": 0.94, "program": 0.4, "total": ettr * 0.4},
        "goodput_ci95": {"scheduling": 0.001, "runtime": 0.02, "program": 0.0, "total": 0.01},
        "job_mttf_h": 41.5, "job_mtbf_model_h": float("inf"),
        "interruptions_by_cause": {"faulty GPU": 5.1, "GPU HBM3": 2.4},
        "lost_hours_by_cause": {"recompute": 8.2, "restart": 3.1, "checkpoint writes": 12.0},
        "young_min": 19.4, "daly_min": 18.4}
    if sweep:
        points = [{"value": m, "ckpt_interval_min": m, "ettr": {"mean": e, "ci95": 0.01}}
                  for m, e in ((5.0, 0.95), (10.0, 0.94), (20.0, 0.93), (60.0, 0.88))]
        payload["sweep"] = {"simulated": True, "param": "ckpt-interval",
                            "field": "ckpt_interval_min", "values": [5, 10, 20, 60],
                            "points": points, "optimum": {"value": 5.0}}
    store.append_event(topo.spec.name, "simulate.run", payload, actor="simulate",
                       reason="simulated training run")
