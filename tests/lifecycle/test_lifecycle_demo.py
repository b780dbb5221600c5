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
        "certify") < names.index("lifecycle-triage")
    store = Store(f"sqlite:///{tmp_path / 'demo.db'}")

    def run_all() -> DemoContext:
        ctx = DemoContext(topo=Topology.build(seed_fleet()), store=store, seed=7,
                          data_dir=tmp_path)
        for _name, _title, step in STEPS:
            step(ctx)
        return ctx

    ctx = run_all()
    lc = ctx.results.lifecycle
    assert lc is not None and lc.onboarding is not None and lc.triage is not None
    assert lc.onboarding.flow_before_power == 7
    # Expected states follow from the certification step's real findings on the twin:
    # a rack-level part (CDU, switch tray, power shelf) sends its rack to maintenance; a
    # finding inside a tray sends that tray to triage and leaves its rack degraded.
    topo = ctx.topo
    findings = [e.payload for e in store.events(kind="certify.finding")]
    assert findings, "the demo's certify step stored no findings"
    rack_level, trays = set(), set()
    for f in findings:
        comp = topo.component(f["component"])
        if comp.kind in ("cdu", "switch_tray", "power_shelf"):
            rack_level.add(comp.rack)
        elif comp.kind in ("gpu", "nic", "cpu", "dpu"):
            trays.add(comp.parent)
    degraded = {topo.component(t).rack for t in trays} - rack_level
    assert lc.counts["rack"] == {
        k: v for k, v in {"maintenance": len(rack_level), "degraded": len(degraded),
                          "production": 7 - len(rack_level) - len(degraded)}.items() if v}
    assert lc.counts["tray"]["triage"] == len(trays)
    n = store.count_events("lifecycle.transition")
    ctx = run_all()
    assert store.count_events("lifecycle.transition") == n
    again = ctx.results.lifecycle
    assert again is not None and again.onboarding is not None
    assert again.onboarding.transitions == 0
