"""Benchmark: evidence bundle, sign and verify time for the seed fleet and a 128k-GPU fleet.

Each fleet gets what a real run leaves: a full onboarding in lifecycle transitions (every rack
and every tray), a certification run (a slow GPU per 8 racks, a switch tray down per 16, a
result per tray and rack) and a simulation run, held in a StoreView (the read of the store
that `rackscale report build` takes once; reading the store itself is bench_report.py's
subject). Timed phases:

- bundle: the ledger and document, the evidence files, their manifest and the disclosure,
  written to disk (what `report build` adds to the store read);
- sign: `report sign` (hash report.json and disclosure.json, Ed25519);
- verify: `report verify`: read and hash every file, check the signature, rebuild the
  topology and the ledger from the evidence alone, compare every figure.

    python bench/bench_statement.py            # seed-504 and a 1,778-rack (128,016 GPU) fleet
    python bench/bench_statement.py --quick    # seed-504 and 32 racks (CI smoke)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "src"))

from rackscale.fleet import COMPUTE_TRAY, GPU, NODE, Topology, seed_fleet, synthetic_fleet
from rackscale.report import JobShape
from rackscale.report.sign import keygen, sign_bundle
from rackscale.report.statement import document_of, params_of, write_statement
from rackscale.report.storeview import StoreView
from rackscale.report.verify import verify_bundle
from rackscale.store import Event

RACK_PATH = ["received", "cabled", "cooling_verified", "powered", "firmware", "burn_in",
             "certified", "production"]
TRAY_PATH = ["onboard", "seatrial", "burn_in", "production"]
T0 = datetime(2026, 11, 30, tzinfo=UTC)


class _Seq:
    def __init__(self) -> None:
        self.n = 0

    def event(self, cid: str, kind: str, payload: dict, actor: str) -> Event:
        self.n += 1
        return Event(seq=self.n, time=T0, component_id=cid, kind=kind, payload=payload,
                     actor=actor, reason="")


def view_of(topo: Topology) -> StoreView:
    seq = _Seq()
    lifecycle = []
    results = []
    for rack in topo.racks:
        prev = None
        for to in RACK_PATH:
            lifecycle.append(seq.event(rack.id, "lifecycle.transition", {"from": prev, "to": to},
                                       "lifecycle"))
            prev = to
        trays = [topo.ids[j] for j in range(rack.first, rack.end)
                 if topo.kinds[j] in (COMPUTE_TRAY, NODE)]
        for tray in trays:
            prev = None
            for to in TRAY_PATH:
                lifecycle.append(seq.event(tray, "lifecycle.transition",
                                           {"from": prev, "to": to}, "lifecycle"))
                prev = to
    findings = []
    for r in topo.racks[::8]:
        findings.append(seq.event(f"{r.id}/c05/gpu1", "certify.finding", {
            "component": f"{r.id}/c05/gpu1", "kind": "slow_gpu", "verdict": "fail", "stage": 1,
            "evidence": {"tflops": 30.1}, "confidence": 0.95, "run_id": "c-1",
            "backend": "twin"}, "certify"))
    for r in topo.racks[3::16]:
        findings.append(seq.event(f"{r.id}/s02", "certify.finding", {
            "component": f"{r.id}/s02", "kind": "nvlink_switch_down", "verdict": "fail",
            "stage": 3, "evidence": {}, "confidence": 0.99, "run_id": "c-1",
            "backend": "twin"}, "certify"))
    bad = {f.component_id.rsplit("/", 2)[0] for f in findings}
    for rack in topo.racks:
        for j in range(rack.first, rack.end):
            if topo.kinds[j] in (COMPUTE_TRAY, NODE):
                results.append(seq.event(topo.ids[j], "certify.result", {
                    "run_id": "c-1", "backend": "twin", "verdict": "pass",
                    "stages_passed": [1, 2]}, "certify"))
        ok = rack.id not in bad
        results.append(seq.event(rack.id, "certify.result", {
            "run_id": "c-1", "backend": "twin", "verdict": "pass" if ok else "fail",
            "stages_passed": [1, 2, 3, 4] if ok else [1]}, "certify"))
    run = seq.event(topo.spec.name, "certify.run", {
        "run_id": "c-1", "backend": "twin", "seed": 7, "faults_file": "faults/seed.yaml",
        "stages": [1, 2, 3, 4], "campaign_s": 812.0}, "certify")
    sim = seq.event(topo.spec.name, "simulate.run", {
        "simulated": True, "run_id": "sim-1", "fleet": topo.spec.name, "job_gpus": 432,
        "days": 30, "trials": 200, "seed": 7, "failure_model": "llama3",
        "ckpt_interval_min": 20.0, "ettr": {"mean": 0.93, "ci95": 0.02},
        "goodput": {"total": 0.37}, "job_mtbf_model_h": float("inf")}, "simulate")
    gpus = {topo.ids[i] for i in range(len(topo.ids)) if topo.kinds[i] == GPU}
    return StoreView(store_url="sqlite:///bench.db", topo=topo, fleet_event=None,
                     inventory_gpus=gpus, inventory_counts={"gpu": len(gpus)},
                     states={e.component_id: e for e in lifecycle}, lifecycle_events=lifecycle,
                     certify_run=run, findings=findings, results=results, simulate_run=sim,
                     last_seq=seq.n)


class _Clock:
    """Wall and CPU seconds of one phase: on a shared, loaded machine the CPU time of this
    process is what the wall time would be on an idle one."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def bench(name: str, topo: Topology, key: Path, tmp: Path) -> dict:
    view = view_of(topo)
    out = tmp / name
    with _Clock() as bundle:
        params = params_of(JobShape(), 2.0)
        doc, ledger = document_of(view, params)
        write_statement(out, view, doc, params)
        (out / "report.json").write_text(json.dumps(doc, indent=2, default=str,
                                                    allow_nan=False))
    with _Clock() as signed:
        sign_bundle(out, key)
    with _Clock() as verified:
        result = verify_bundle(out, key.with_name(key.name + ".pub"))
    assert result.ok, result.first_problem
    size = sum(p.stat().st_size for p in (out / "evidence").iterdir())
    return {"fleet": name, "gpus": len(topo.gpu_ids), "events": view.last_seq,
            "evidence_mib": size / 2**20, "bundle": bundle, "sign": signed,
            "verify": verified, "usable": ledger.steps[-2].count}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="seed fleet and 32 racks only")
    args = ap.parse_args()
    fleets = [("seed-504", lambda: Topology.build(seed_fleet()))]
    racks = 32 if args.quick else 1778  # 1,778 NVL72 racks = 128,016 GPUs
    fleets.append((f"synthetic-{racks}", lambda: Topology.build(synthetic_fleet(racks))))
    print(f"{'fleet':<16}{'GPUs':>9}{'events':>9}{'evidence MiB':>14}"
          f"{'bundle s (cpu)':>16}{'sign s (cpu)':>16}{'verify s (cpu)':>16}{'certified':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "bench.pem"
        keygen(key)
        for name, build in fleets:
            r = bench(name, build(), key, Path(tmp))
            cells = "".join(f"{r[k].wall:>9.2f} ({r[k].cpu:.2f})".rjust(16)
                            for k in ("bundle", "sign", "verify"))
            print(f"{r['fleet']:<16}{r['gpus']:>9,}{r['events']:>9,}{r['evidence_mib']:>14.1f}"
                  f"{cells}{r['usable']:>11,}")


if __name__ == "__main__":
    main()
