"""The demo's lifecycle steps: onboarding then triage, twice, with certification events in
between; the second run reuses the store and writes no transition."""

from __future__ import annotations

from pathlib import Path

from rackscale.cli.demo import STEPS, DemoContext
from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store


def test_demo_steps_order_and_idempotence(tmp_path: Path) -> None:
    names = [n for n, _, _ in STEPS]
    assert names.index("fleet") < names.index("lifecycle-onboarding") < names.index(
        "lifecycle-triage")
    store = Store(f"sqlite:///{tmp_path / 'demo.db'}")

    def run_all() -> DemoContext:
        ctx = DemoContext(topo=Topology.build(seed_fleet()), store=store, seed=7,
                          data_dir=tmp_path)
        for name, _title, step in STEPS:
            if name == "lifecycle-triage" and store.count_events("certify.") == 0:
                # stand-in for the certify room: one bad GPU, passes everywhere else
                store.append_event("us-east/r02/c07/gpu3", "certify.finding", {
                    "component": "us-east/r02/c07/gpu3", "kind": "slow_gpu", "stage": "gpu",
                    "evidence": {}, "confidence": 0.9, "run_id": "r", "backend": "twin",
                    "verdict": "fail"})
                for rack in ctx.topo.racks:
                    store.append_event(rack.id, "certify.result", {
                        "run_id": "r", "backend": "twin", "verdict": "pass"})
            step(ctx)
        return ctx

    ctx = run_all()
    lc = ctx.results["lifecycle"]
    assert lc["onboarding"]["flow_before_power"] == 7
    assert lc["counts"]["rack"] == {"production": 6, "degraded": 1}
    assert lc["counts"]["tray"] == {"production": 125, "triage": 1}
    n = store.count_events("lifecycle.transition")
    ctx = run_all()
    assert store.count_events("lifecycle.transition") == n
    assert ctx.results["lifecycle"]["onboarding"]["transitions"] == 0
