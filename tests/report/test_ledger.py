"""The ledger on the seed fleet, from contract events appended through the real store."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete

from rackscale.fleet import Topology, synthetic_fleet
from rackscale.report import (
    FAULT_RULES,
    RACK_STATES,
    TRAY_STATES,
    JobShape,
    JobShapeError,
    StoreView,
    build_ledger,
    collect,
)
from rackscale.store import ComponentRow, Event, Store, load_topology

from .events import SEED_FAULTS, certify, onboard, simulate, trays_of, walk

KEYS = ["headline", "installed", "powered", "healthy", "domain", "certified", "goodput"]


def counts(ledger) -> dict[str, float]:
    return {s.key: s.count for s in ledger.steps}


def assert_monotone(ledger) -> None:
    values = [s.count for s in ledger.steps]
    assert [s.key for s in ledger.steps] == KEYS
    assert all(b <= a for a, b in pairwise(values)), values
    for above, step in pairwise(ledger.steps):
        # every GPU a step drops is accounted for by a reason code
        assert sum(step.lost.values()) == pytest.approx(above.count - step.count)


def test_full_seed_fleet_ledger(fleet_store: Store, topo: Topology) -> None:
    onboard(fleet_store, topo)
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo, ettr=0.9)
    ledger = build_ledger(collect(fleet_store))
    assert_monotone(ledger)
    c = counts(ledger)
    assert c["headline"] == c["installed"] == c["powered"] == 504
    # slow GPU (1) + bad cable's GPU (1) + a throttled rack (72); the switch and leaf findings
    # do not remove GPUs one by one
    assert c["healthy"] == 504 - 1 - 1 - 72
    healthy = ledger.step("healthy")
    assert healthy.lost == {"finding:slow_gpu": 1, "finding:bad_cable": 1,
                            "finding:coolant_flow_low": 72}
    # r04 (switch down) is degraded; us-east/r02 and us-west/r01 lost one GPU each
    assert ledger.step("domain").lost == {"domain_degraded:nvlink_switch_down": 72,
                                          "domain_partial": 142}
    assert c["domain"] == c["certified"] == 3 * 72
    assert c["goodput"] == pytest.approx(216 * 0.9)  # ETTR, not the MFU-weighted total
    good = ledger.step("goodput")
    assert good.basis == "simulated" and good.provenance["seed"] == 7
    assert good.ci95 == [pytest.approx(216 * 0.88, abs=0.05), pytest.approx(216 * 0.92, abs=0.05)]
    assert "432 GPUs" in good.note  # the simulated job is not the certified capacity
    assert ledger.step("healthy").basis == "simulated"  # twin backend
    assert ledger.step("healthy").provenance["faults_file"] == "faults/seed.yaml"
    racks = {r["id"]: r for r in ledger.racks}
    assert racks["us-west/r03"]["healthy_gpus"] == 0
    assert racks["us-east/r04"]["findings"] == ["nvlink_switch_down @ s02"]
    tray = next(t for t in racks["us-east/r02"]["trays"] if t["name"] == "c07")
    assert tray["findings"] == ["slow_gpu"] and tray["healthy_gpus"] == 3
    leaf = next(f for f in ledger.findings if f["kind"] == "leaf_degraded")
    assert leaf["action"] == "degrade" and leaf["dropped_gpus"] == 0
    assert leaf["affected_gpus"] == topo.affected_gpus("us-east/leaf-rail1-0").size > 0
    assert all(t["flagged"] for t in racks["us-east/r01"]["trays"])  # rail 1 of every tray


def test_nothing_run_carries_the_count_and_says_not_run(fleet_store: Store) -> None:
    ledger = build_ledger(collect(fleet_store))
    assert_monotone(ledger)
    assert set(counts(ledger).values()) == {504}
    for key in ("powered", "healthy", "certified", "goodput"):
        assert ledger.step(key).basis == "not_run"
    assert ledger.step("powered").note == "no lifecycle data"
    assert ledger.step("goodput").reason == "simulate_not_run"


def test_installed_agrees_with_the_inventory(fleet_store: Store, topo: Topology) -> None:
    gone = ["us-west/r02/c05/gpu0", "us-west/r02/c05/gpu1", "us-east/r01/c18/gpu3"]
    with fleet_store.session() as s:
        s.execute(delete(ComponentRow).where(ComponentRow.id.in_(gone)))
    ledger = build_ledger(collect(fleet_store))
    assert ledger.step("installed").count == fleet_store.count_components(kind="gpu") == 501
    assert ledger.step("installed").lost == {"not_in_inventory": 3}
    assert_monotone(ledger)


def test_powered_follows_latest_lifecycle_state(fleet_store: Store, topo: Topology) -> None:
    racks = [r.id for r in topo.racks]
    onboard(fleet_store, topo, racks=racks[:5])
    walk(fleet_store, racks[5], ["received", "cabled", "cooling_verified"])  # no power yet
    # racks[6] never onboarded; one tray of racks[0] goes out for repair, one into triage
    repair, triage = trays_of(topo, racks[0])[3], trays_of(topo, racks[1])[0]
    walk(fleet_store, repair, ["triage", "repair"], start="production")
    walk(fleet_store, triage, ["triage"], start="production")
    # a rack that went back to maintenance later: its *latest* state counts
    walk(fleet_store, racks[4], ["maintenance"], start="production")
    certify(fleet_store, topo, [])
    ledger = build_ledger(collect(fleet_store))
    assert_monotone(ledger)
    powered = ledger.step("powered")
    assert powered.lost == {"rack_not_onboarded": 72, "rack_state:cooling_verified": 72,
                            "rack_state:maintenance": 72, "tray_state:repair": 4}
    assert powered.count == 504 - 3 * 72 - 4
    assert ledger.step("healthy").lost == {"tray_state:triage": 4}


def test_latest_certify_run_only_and_rules(fleet_store: Store, topo: Topology) -> None:
    onboard(fleet_store, topo)
    certify(fleet_store, topo, SEED_FAULTS, run_id="c-old")
    new = [
        {"component": "us-east/r01/c01/gpu0", "kind": "slow_gpu", "verdict": "warn",
         "stage": 1, "evidence": {}, "confidence": 0.6},
        {"component": "us-east/r03/c02/nic1", "kind": "flapping", "verdict": "fail",
         "stage": 4, "evidence": {"of": "bad_cable", "duty": 0.3},
         "confidence": 0.8},
        {"component": "us-west/r02/c09/gpu2", "kind": "cosmic_ray", "verdict": "fail",
         "stage": 1, "evidence": {}, "confidence": 0.5},
    ]
    certify(fleet_store, topo, new, run_id="c-new")
    ledger = build_ledger(collect(fleet_store))
    assert_monotone(ledger)
    assert ledger.step("healthy").provenance["run_id"] == "c-new"
    assert [f["kind"] for f in ledger.findings] == ["slow_gpu", "flapping", "cosmic_ray"]
    # warn only flags; flapping takes bad_cable's rule; an unknown kind is counted out
    assert ledger.step("healthy").lost == {"finding:bad_cable": 1, "finding:cosmic_ray": 1}
    assert ledger.findings[0]["action"] == "degrade"


def test_job_shape_needs_results_and_stages(fleet_store: Store, topo: Topology) -> None:
    onboard(fleet_store, topo)
    certify(fleet_store, topo, [], stages=(1, 2, 3),
            skip_racks=("us-west/r03",), fail_racks=("us-west/r02",))
    view = collect(fleet_store)
    ledger = build_ledger(view)
    assert_monotone(ledger)
    assert ledger.step("certified").lost == {"no_certify_result": 72,
                                             "domain_verdict:fail": 72}
    strict = build_ledger(view, JobShape(name="x", gpus_per_domain=72,
                                         required_stages=("multi-rack",)))
    assert strict.step("certified").lost == {"no_certify_result": 72,
                                             "domain_verdict:fail": 72,
                                             "stage_not_passed:multi-rack": 5 * 72}
    sixty_four = build_ledger(view, JobShape(name="64", gpus_per_domain=64))
    assert sixty_four.step("certified").lost["shape_remainder"] == 5 * 8
    with pytest.raises(JobShapeError, match="gpus_per_domain"):
        JobShape(gpus_per_domain=0)


def test_state_tables_cover_the_lifecycle_rooms_states() -> None:
    lifecycle = pytest.importorskip("rackscale.lifecycle.states")
    assert set(RACK_STATES) == {s.value for s in lifecycle.RackState}
    assert set(TRAY_STATES) == {s.value for s in lifecycle.TrayState}
    # a rack's GPUs count while it serves: the lifecycle's own serving states, not a copy
    assert {k for k, v in RACK_STATES.items() if v.powered} == {
        s.value for s in lifecycle.SERVING_RACK_STATES}


def test_fault_rules_cover_every_design_fault_kind() -> None:
    kinds = {"slow_gpu", "hbm_degraded", "gpu_dead", "sdc", "nvlink_port_down",
             "nvlink_switch_down", "nvlink_switch_degraded", "bad_cable", "nic_dead",
             "leaf_degraded", "leaf_down", "coolant_flow_low", "power_shelf_down"}
    assert set(FAULT_RULES) == kinds


# ---------------------------------------------------------------- property: always monotone
def _event(seq: int, cid: str, kind: str, payload: dict) -> Event:
    return Event(seq=seq, time=datetime.now(UTC), component_id=cid, kind=kind,
                 payload=payload, actor="prop", reason="")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_ledger_is_monotone_for_any_events(topo: Topology, data: st.DataObject) -> None:
    racks = [r.id for r in topo.racks]
    trays = [t for r in racks for t in trays_of(topo, r)]
    parts = [c for c in topo.ids if "/" in c]
    view = StoreView(store_url="memory", topo=topo, fleet_event=None,
                     inventory_gpus=set(data.draw(st.sets(st.sampled_from(topo.gpu_ids),
                                                          min_size=400))),
                     inventory_counts={})
    seq = 0
    for cid in data.draw(st.lists(st.sampled_from(racks + trays), max_size=40)):
        seq += 1
        table = RACK_STATES if cid in racks else TRAY_STATES
        state = data.draw(st.sampled_from([*table, "bogus"]))
        view.states[cid] = _event(seq, cid, "lifecycle.transition",
                                  {"from": None, "to": state})
    if data.draw(st.booleans()):
        view.certify_run = _event(seq + 1, topo.spec.name, "certify.run",
                                  {"run_id": "r", "backend": "twin"})
        for cid in data.draw(st.lists(st.sampled_from(parts), max_size=12)):
            kind = data.draw(st.sampled_from([*FAULT_RULES, "flapping", "unknown"]))
            verdict = data.draw(st.sampled_from(["fail", "warn"]))
            view.findings.append(_event(seq + 2, cid, "certify.finding",
                                        {"component": cid, "kind": kind, "verdict": verdict,
                                         "stage": 1, "confidence": 0.9, "run_id": "r",
                                         "backend": "twin"}))
        for cid in data.draw(st.lists(st.sampled_from(racks), max_size=7)):
            view.results.append(_event(seq + 3, cid, "certify.result", {
                "run_id": "r", "verdict": data.draw(st.sampled_from(["pass", "fail"])),
                "stages_passed": ["domain"]}))
    if data.draw(st.booleans()):
        view.simulate_run = _event(seq + 4, topo.spec.name, "simulate.run", {
            "run_id": "sim-p", "fleet": topo.spec.name, "simulated": True, "job_gpus": 72,
            "days": 1, "trials": 2, "seed": 0, "failure_model": "llama3",
            "ckpt_interval_min": 30, "goodput": {"total": data.draw(st.floats(0, 1))},
            "ettr": {"mean": data.draw(st.floats(0, 1)), "ci95": [0.85, 0.95]}})
    ledger = build_ledger(view)
    assert_monotone(ledger)
    assert ledger.step("installed").count == len(view.inventory_gpus)


def test_hgx_fleet_domains_are_nodes(tmp_path) -> None:
    topo = Topology.build(synthetic_fleet(2, regions=1, template="hgx-h200"))
    store = Store(f"sqlite:///{tmp_path}/hgx.db")
    try:
        load_topology(store, topo)
        onboard(store, topo)
        rack = topo.racks[0].id
        certify(store, topo, [
            {"component": f"{rack}/n02/nvsw1", "kind": "nvlink_switch_down", "verdict": "fail",
             "stage": 3, "evidence": {}, "confidence": 0.9}])
        view = collect(store)
        # whole NVL72 domains cannot come from 8-GPU nodes
        whole = build_ledger(view, JobShape(name="whole-nvl72-domains", gpus_per_domain=72))
        assert whole.step("certified").count == 0
        assert set(whole.step("certified").lost) == {"shape_too_small"}
        node = build_ledger(view, JobShape(name="hgx-nodes", gpus_per_domain=8,
                                           required_stages=("tray",)))
        assert_monotone(node)
        # the NVSwitch finding fails one node's domain, nothing else
        assert node.step("domain").lost == {"domain_degraded:nvlink_switch_down": 8}
        # node results carry stages 1-2 in this run, racks carry the rest
        assert node.step("certified").count == len(topo.gpu_ids) - 8
    finally:
        store.close()
