"""Each rule of the usable-capacity ledger, through `build_ledger` on an in-memory store view of
a two-rack fleet (test_ledger.py runs the same rules on events appended to a real store).

Racks r01 (GPUs 0..71) and r02 (72..143); tray cNN of a rack holds 4 GPUs.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from rackscale.fleet import Topology, synthetic_fleet
from rackscale.report import (
    JobShape,
    JobShapeError,
    Ledger,
    Step,
    StoreView,
    build_ledger,
)
from rackscale.store import Event, InvalidPayload

R1, R2 = "region-0/r01", "region-0/r02"
KEYS = ["headline", "installed", "powered", "healthy", "domain", "certified", "goodput"]


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology.build(synthetic_fleet(2, regions=1))


SIM_BASE: dict[str, Any] = {
    "run_id": "sim-t", "fleet": "synthetic-2", "simulated": True, "job_gpus": 144, "days": 1.0,
    "trials": 2, "seed": 0, "failure_model": "llama3", "ckpt_interval_min": 30.0,
    "goodput": {"total": 0.4}}


class V:
    """Builds a StoreView event by event, numbering events like the store does."""

    def __init__(self, topo: Topology, inventory: set[str] | None = None) -> None:
        self.view = StoreView(store_url="sqlite:///t.db", topo=topo, fleet_event=None,
                              inventory_gpus=set(topo.gpu_ids) if inventory is None
                              else inventory, inventory_counts={})
        self.seq = 0

    def ev(self, cid: str, kind: str, payload: dict[str, Any]) -> Event:
        self.seq += 1
        return Event(seq=self.seq, time=datetime.now(UTC), component_id=cid, kind=kind,
                     payload=payload, actor="test", reason="")

    def state(self, cid: str, to: str, **extra: Any) -> V:
        self.view.states[cid] = self.ev(cid, "lifecycle.transition",
                                        {"from": None, "to": to} | extra)
        return self

    def all_production(self, **extra: Any) -> V:
        for rack in self.view.topo.racks:
            self.state(rack.id, "production", **extra)
        return self

    def run(self, backend: str = "twin", **extra: Any) -> V:
        self.view.certify_run = self.ev("synthetic-2", "certify.run",
                                        {"run_id": "c-1", "backend": backend} | extra)
        return self

    def finding(self, cid: str, kind: str, verdict: str = "fail", **extra: Any) -> V:
        """A finding with the contract's required fields (stage 1 unless given)."""
        self.view.findings.append(self.ev(cid, "certify.finding", {
            "component": cid, "kind": kind, "verdict": verdict, "stage": 1,
            "confidence": 0.9, "run_id": "c-1", "backend": "twin"} | extra))
        return self

    def result(self, cid: str, verdict: str = "pass", stages=("domain",)) -> V:
        self.view.results.append(self.ev(cid, "certify.result", {
            "verdict": verdict, "stages_passed": list(stages)}))
        return self

    def passed(self, stages=(1, 2, 3)) -> V:
        for rack in self.view.topo.racks:
            self.result(rack.id, stages=stages)
        return self

    def sim(self, **payload: Any) -> V:
        """A simulate.run: the contract's required fields (no ETTR: each test gives its own)
        with `payload` over them."""
        self.view.simulate_run = self.ev("synthetic-2", "simulate.run", SIM_BASE | payload)
        return self

    def ledger(self, shape: JobShape | None = None):
        return build_ledger(self.view, shape)


def counts(ledger) -> list[float]:
    assert [s.key for s in ledger.steps] == KEYS
    return [s.count for s in ledger.steps]


# --- job shape and steps -----------------------------------------------------------------------

def test_job_shape_defaults_and_validation():
    shape = JobShape()
    # by default each rack's own whole domain, named by the fleet's pools once resolved
    assert (shape.name, shape.gpus_per_domain, shape.required_stages) == (
        "whole-domains", None, ("domain",))
    assert shape.domain_gpus(72) == 72 and shape.domain_gpus(8) == 8
    assert JobShape(name="n", gpus_per_domain=64).domain_gpus(72) == 64
    assert JobShape(gpus_per_domain=1).gpus_per_domain == 1
    for bad in (0, -8):
        with pytest.raises(JobShapeError, match=rf"job shape x: gpus_per_domain must be > 0, "
                                                rf"got {bad}; use 72 for whole NVL72 domains"):
            JobShape(name="x", gpus_per_domain=bad)


def test_step_as_dict_carries_every_field(topo):
    step = V(topo).ledger().step("headline")
    assert step.as_dict() == {
        "key": "headline", "label": "headline GPUs", "count": 144, "reason": "fleet_spec",
        "basis": "spec", "source": "fleet spec 'synthetic-2' (2 racks) loaded in sqlite:///t.db",
        "lost": {}, "provenance": {"fleet": "synthetic-2", "fleet_loaded_seq": None},
        "note": "", "ci95": None}


def test_headline_names_the_fleet_loaded_event(topo):
    v = V(topo)
    v.view.fleet_event = v.ev("synthetic-2", "fleet.loaded", {})
    assert v.ledger().step("headline").provenance["fleet_loaded_seq"] == 1


# --- installed ---------------------------------------------------------------------------------

def test_installed_drops_gpus_missing_from_the_inventory_and_warns_of_extra_rows(topo):
    inv = set(topo.gpu_ids) - {topo.gpu_ids[5], topo.gpu_ids[100]}
    inv |= {"region-0/r09/c01/gpu0", "region-0/r09/c01/gpu1", "region-0/r09/c01/gpu2"}
    ledger = V(topo, inventory=inv).ledger()
    step = ledger.step("installed")
    assert (step.count, step.lost, step.basis, step.reason) == (
        142, {"not_in_inventory": 2}, "inventory", "inventory")
    assert step.source == "components of kind gpu in sqlite:///t.db"
    assert step.provenance == {"inventory_gpu_rows": 145}
    assert ledger.warnings == ["3 GPU rows in the inventory are not in the fleet spec"]
    assert ledger.gpu_reason[5] == ledger.gpu_reason[100] == "not_in_inventory"
    # the rest of each partial domain drops one step later, under its own reason
    assert ledger.gpu_reason[6] == ledger.gpu_reason[101] == "domain_partial"
    assert V(topo).ledger().warnings == []


# --- powered and cooled ------------------------------------------------------------------------

def test_no_lifecycle_data_carries_the_count_through(topo):
    step = V(topo).ledger().step("powered")
    assert (step.count, step.reason, step.basis, step.note) == (
        144, "no_lifecycle_data", "not_run", "no lifecycle data")
    assert step.source == ("no lifecycle.transition events: lifecycle not run, count carried "
                           "through")


def test_racks_without_state_or_unpowered_lose_all_their_gpus(topo):
    ledger = V(topo).state(R1, "maintenance").ledger()
    step = ledger.step("powered")
    assert step.lost == {"rack_not_onboarded": 72, "rack_state:maintenance": 72}
    assert step.count == 0
    assert ledger.gpu_reason[0] == "rack_state:maintenance"
    assert ledger.gpu_reason[72] == "rack_not_onboarded"


def test_a_rack_not_onboarded_does_not_stop_the_next_racks_trays(topo):
    v = V(topo).state(R2, "production").state(f"{R2}/c01", "onboard")
    assert v.ledger().step("powered").lost == {"rack_not_onboarded": 72,
                                               "tray_state:onboard": 4}


def test_an_unpowered_rack_does_not_stop_the_next_racks_trays(topo):
    v = V(topo).state(R1, "cabled").state(R2, "production")
    v.state(f"{R2}/c03", "repair").state(f"{R1}/c01", "bogus")
    ledger = v.ledger()
    assert ledger.step("powered").lost == {"rack_state:cabled": 72, "tray_state:repair": 4}
    assert ledger.warnings == []  # r01 is off: its trays' states are not looked at
    assert ledger.gpu_reason[72 + 8: 72 + 12] == ["tray_state:repair"] * 4


def test_tray_states_in_a_powered_rack(topo):
    v = V(topo).all_production()
    v.state(f"{R1}/c02", "onboard").state(f"{R1}/c03", "production")
    v.state(f"{R1}/c04", "weird").state(f"{R2}/c18", "triage")
    ledger = v.ledger()
    step = ledger.step("powered")
    assert step.lost == {"tray_state:onboard": 4, "unknown_tray_state:weird": 4}
    assert step.count == 136
    assert ledger.warnings == ["region-0/r01/c04: lifecycle state 'weird' unknown to the report"]
    assert ledger.gpu_reason[4:16] == (["tray_state:onboard"] * 4 + ["domain_partial"] * 4
                                       + ["unknown_tray_state:weird"] * 4)


def test_unknown_rack_state_is_counted_out_with_a_warning(topo):
    v = V(topo).state(R1, "floating").state(R2, "production").state(f"{R1}/c01", "odd")
    ledger = v.ledger()
    assert ledger.step("powered").lost == {"unknown_rack_state:floating": 72}
    assert ledger.warnings == [
        "region-0/r01: lifecycle state 'floating' unknown to the report",
        "region-0/r01/c01: lifecycle state 'odd' unknown to the report"]


@pytest.mark.parametrize(("payloads", "basis"), [
    ([{"simulated": True}, {"simulated": True}], "simulated"),
    ([{"backend": "real"}, {"driver_backend": "real"}], "measured"),
    ([{"backend": "real"}, {"simulated": True}], "recorded"),
    ([{"backend": "twin"}, {"backend": "twin"}], "simulated"),
    ([{}, {}], "recorded"),
    ([{"simulated": "yes", "backend": "real"}, {"backend": "real"}], "measured"),
])
def test_powered_basis_follows_the_lifecycle_backends(topo, payloads, basis):
    v = V(topo)
    for rack, p in zip((R1, R2), payloads, strict=True):
        v.state(rack, "production", **p)
    step = v.ledger().step("powered")
    assert step.basis == basis
    assert (step.reason, step.provenance) == ("lifecycle", {"components_with_state": 2})
    assert step.source == "latest lifecycle.transition of 2 racks/trays (event seq 1..2)"


# --- healthy -----------------------------------------------------------------------------------

def test_no_certify_run_carries_the_count_and_says_so(topo):
    ledger = V(topo).all_production().ledger()
    for key in ("healthy", "domain", "certified"):
        step = ledger.step(key)
        assert (step.count, step.reason) == (144, "certify_not_run"), key
    assert ledger.step("healthy").note == ledger.step("certified").note == \
        "certification not run"
    assert ledger.step("healthy").basis == "not_run"
    assert ledger.step("healthy").source == ("no certify.run events: certification not run, "
                                             "count carried through")


def test_finding_actions_remove_degrade_domain_and_warn(topo):
    v = V(topo).all_production().run()
    v.finding(f"{R1}/c01/gpu1", "slow_gpu", stage=1, confidence=0.97,
              evidence={"tflops": 30.8})
    v.finding(f"{R1}/c05/gpu0", "gpu_dead", verdict="warn")
    v.finding(f"{R2}/s04", "nvlink_switch_down", stage=3)
    v.finding("region-0/leaf-rail1-0", "leaf_degraded", stage=4)
    v.passed()
    ledger = v.ledger()
    healthy = ledger.step("healthy")
    assert healthy.lost == {"finding:slow_gpu": 1}
    assert healthy.count == 143
    assert [(f["component"], f["action"], f["affected_gpus"], f["dropped_gpus"])
            for f in ledger.findings] == [
        (f"{R1}/c01/gpu1", "remove", 1, 1),
        (f"{R1}/c05/gpu0", "degrade", 1, 0),        # a warn never removes capacity
        (f"{R2}/s04", "domain", 72, 0),
        ("region-0/leaf-rail1-0", "degrade", 2 * 18, 0)]
    first = ledger.findings[0]
    assert first == {
        "component": f"{R1}/c01/gpu1", "kind": "slow_gpu", "stage": "gpu", "verdict": "fail",
        "confidence": 0.97, "evidence": {"tflops": 30.8}, "action": "remove",
        "rule": "a straggler slows every synchronous job it joins", "backend": "twin",
        "seq": first["seq"], "affected_gpus": 1, "dropped_gpus": 1}
    assert ledger.findings[1]["stage"] == "gpu" and ledger.findings[1]["evidence"] == {}
    assert ledger.findings[2]["stage"] == "domain"
    assert ledger.findings[3]["stage"] == "multi-rack"
    # the switch finding costs r02 its whole domain one step later; r01 loses its partial one
    assert ledger.step("domain").lost == {"domain_degraded:nvlink_switch_down": 72,
                                          "domain_partial": 71}
    assert ledger.step("domain").count == 0
    racks = {r["id"]: r for r in ledger.racks}
    c05 = next(t for t in racks[R1]["trays"] if t["name"] == "c05")
    assert c05["flagged"] and c05["usable_gpus"] == 0 and c05["healthy_gpus"] == 4
    assert all(t["flagged"] for t in racks[R1]["trays"])  # the leaf of rail 1 reaches every tray
    assert all(t["flagged"] for t in racks[R2]["trays"])


def test_finding_stages_are_named_when_numbered_and_kept_otherwise(topo):
    v = V(topo).all_production().run()
    for stage in (2, 5, "multi-rack", "lab"):
        v.finding(f"{R1}/c01/gpu0", "slow_gpu", verdict="warn", stage=stage)
    assert [f["stage"] for f in v.ledger().findings] == ["tray", "5", "multi-rack", "lab"]


def test_finding_on_the_fleet_removes_everything_and_unknown_components_warn(topo):
    v = V(topo).all_production().run()
    v.finding("region-0/r07/c01/gpu0", "slow_gpu")
    ledger = v.ledger()
    assert ledger.warnings == ["finding on 'region-0/r07/c01/gpu0', which is not in fleet "
                               "synthetic-2"]
    assert ledger.findings[0]["affected_gpus"] == 0
    assert ledger.step("healthy").count == 144
    v.finding("synthetic-2", "sdc")
    assert v.ledger().step("healthy").lost == {"finding:sdc": 144}


def test_a_finding_is_read_through_its_contract(topo):
    v = V(topo).all_production().run(backend="real")
    # an empty component is the event's; a kind no rule knows is counted out to be safe
    v.finding(f"{R1}/c02/gpu3", "mystery", component="", backend="real")
    ledger = v.ledger()
    row = ledger.findings[0]
    assert (row["component"], row["kind"], row["backend"]) == (f"{R1}/c02/gpu3", "mystery",
                                                               "real")
    assert row["action"] == "remove"
    assert ledger.step("healthy").lost == {"finding:mystery": 1}
    assert ledger.step("healthy").basis == "measured"
    # a payload that does not fit the contract is refused, naming the field (the store
    # refuses it on append; one of a hand-made store is not guessed at)
    v.view.findings.append(v.ev(f"{R1}/c02/gpu3", "certify.finding", {"verdict": "fail"}))
    with pytest.raises(InvalidPayload, match=r"certify\.finding .*component: Field required"):
        v.ledger()


def test_first_domain_fault_names_the_degraded_domain(topo):
    v = V(topo).all_production().run()
    v.finding(f"{R2}/s04", "nvlink_switch_degraded").finding(f"{R2}/s05", "nvlink_switch_down")
    assert v.ledger().step("domain").lost == {"domain_degraded:nvlink_switch_degraded": 72}


def test_a_degraded_domain_already_gone_costs_nothing_more(topo):
    v = V(topo).all_production().run()
    v.finding(f"{R2}/cdu", "coolant_flow_low").finding(f"{R2}/s04", "nvlink_switch_down")
    ledger = v.ledger()
    assert ledger.step("healthy").lost == {"finding:coolant_flow_low": 72}
    assert ledger.step("domain").lost == {}
    assert ledger.gpu_reason[72] == "finding:coolant_flow_low"


def test_trays_in_triage_leave_the_healthy_set(topo):
    v = V(topo).all_production().state(f"{R1}/c09", "triage").run()
    ledger = v.ledger()
    assert ledger.step("powered").lost == {}
    assert ledger.step("healthy").lost == {"tray_state:triage": 4}
    assert ledger.gpu_reason[32:36] == ["tray_state:triage"] * 4


@pytest.mark.parametrize(("backend", "basis"), [("real", "measured"), ("twin", "simulated")])
def test_healthy_basis_and_provenance_follow_the_run(topo, backend, basis):
    v = V(topo).all_production().run(backend=backend, seed=3, faults_file="f.yaml",
                                     other="x")
    v.finding(f"{R1}/c01/gpu0", "slow_gpu").passed()
    step = v.ledger().step("healthy")
    assert step.basis == basis
    run_seq = v.view.certify_run.seq
    assert step.provenance == {"run_id": "c-1", "backend": backend, "seed": 3,
                               "faults_file": "f.yaml", "event_seq": run_seq}
    assert step.source == f"certify.run c-1 (event seq {run_seq}): 1 findings, 2 results"
    assert step.reason == "certify_findings"
    later = v.ledger()
    assert later.step("domain").basis == later.step("certified").basis == basis
    assert later.step("domain").provenance == step.provenance
    assert later.step("domain").reason == "nvlink_domains"


# --- certified for the job shape ---------------------------------------------------------------

def test_certified_needs_a_passing_result_with_the_required_stages(topo):
    v = V(topo).all_production().run()
    v.result(R1, stages=(1, 2)).result(R2, verdict="fail")
    step = v.ledger().step("certified")
    assert step.lost == {"stage_not_passed:domain": 72, "domain_verdict:fail": 72}
    assert step.reason == "certify_results" and step.note == ""
    v2 = V(topo).all_production().run().result(R1, stages=("gpu", "tray", "domain"))
    assert v2.ledger().step("certified").lost == {"no_certify_result": 72}
    strict = JobShape(name="s", required_stages=("tray", "multi-rack"))
    v3 = V(topo).all_production().run().passed(stages=(1, 2, 3))
    assert v3.ledger(strict).step("certified").lost == {"stage_not_passed:multi-rack": 144}
    v4 = V(topo).all_production().run().passed(stages=(1, 3))
    assert v4.ledger(strict).step("certified").lost == {"stage_not_passed:tray": 144}


def test_certified_without_a_run_keeps_whole_domains(topo):
    ledger = V(topo).all_production().ledger(JobShape(name="h", gpus_per_domain=64))
    step = ledger.step("certified")
    assert (step.count, step.lost) == (128, {"shape_remainder": 16})
    assert ledger.gpu_reason[64:72] == ["shape_remainder"] * 8
    assert ledger.gpu_reason[63] == "ok"


def test_shapes_that_fit_a_domain_several_times_or_not_at_all(topo):
    v = V(topo).all_production().run().passed()
    assert v.ledger(JobShape(name="36", gpus_per_domain=36)).step("certified").count == 144
    small = v.ledger(JobShape(name="37", gpus_per_domain=37)).step("certified")
    assert small.lost == {"shape_remainder": 70}
    exact = v.ledger(JobShape(name="72", gpus_per_domain=72)).step("certified")
    assert exact.count == 144 and exact.lost == {}
    big = v.ledger(JobShape(name="big", gpus_per_domain=73, required_stages=()))
    step = big.step("certified")
    assert step.lost == {"shape_too_small": 144}
    assert step.source == ("job shape big (73 GPUs per domain, stages none); certify.result "
                           "per domain")
    assert step.label == "certified for big"


def test_partial_domains_are_not_certified_and_racks_say_so(topo):
    v = V(topo).all_production().run().finding(f"{R1}/c01/gpu0", "gpu_dead").passed()
    ledger = v.ledger()
    assert ledger.step("domain").lost == {"domain_partial": 71}
    assert ledger.step("certified").lost == {}
    assert counts(ledger)[:6] == [144, 144, 144, 143, 72, 72]
    racks = {r["id"]: r for r in ledger.racks}
    assert (racks[R1]["domains_healthy"], racks[R1]["domains_certified"]) == (0, 0)
    assert (racks[R2]["domains_healthy"], racks[R2]["domains_certified"]) == (1, 1)
    assert racks[R1]["domains"] == 1
    assert (racks[R1]["healthy_gpus"], racks[R1]["usable_gpus"]) == (71, 0)
    assert racks[R1]["gpus"] == 72 and racks[R1]["state"] == "production"
    c01 = racks[R1]["trays"][0]
    assert c01 == {"id": f"{R1}/c01", "name": "c01", "state": None, "gpus": 4,
                   "healthy_gpus": 3, "usable_gpus": 0, "flagged": False,
                   "findings": ["gpu_dead"],
                   "reasons": {"finding:gpu_dead": 1, "domain_partial": 3}}


def test_rack_rows_list_rack_level_findings_with_their_part(topo):
    v = V(topo).all_production().run()
    # A finding outside any rack (a leaf) or outside the fleet is skipped, not the end of it.
    v.finding("region-0/leaf-rail0-0", "leaf_down").finding("region-0/r09/cdu", "sdc")
    v.finding(f"{R2}/cdu", "coolant_flow_low").finding(R1, "power_shelf_down")
    v.finding(f"{R1}/c03/nic2", "bad_cable")
    racks = {r["id"]: r for r in v.ledger().racks}
    assert racks[R2]["findings"] == ["coolant_flow_low @ cdu"]
    assert racks[R1]["findings"] == ["power_shelf_down @ r01"]
    assert racks[R1]["trays"][2]["findings"] == ["bad_cable"]
    assert all(t["findings"] == [] for t in racks[R2]["trays"])


# --- expected goodput --------------------------------------------------------------------------

def _goodput(topo, **payload):
    v = V(topo).all_production()
    if payload:
        v.sim(**payload)
    return v.ledger().step("goodput")


def test_goodput_not_run_and_invalid(topo):
    step = _goodput(topo)
    assert (step.count, step.reason, step.basis, step.note) == (
        144, "simulate_not_run", "not_run", "simulation not run")
    assert step.source == "no simulate.run events: count carried through"
    # A payload outside the contract (an ETTR as a bare number or a string, no ETTR) is not
    # applied, nor is a typed one whose ETTR and goodput split are both out of range.
    for bad in ({"ettr": 1.5}, {"ettr": -0.1}, {"ettr": float("nan")}, {"ettr": "0.9"},
                {"goodput": {"scheduling": 0.9}}, {"goodput": 0.9}, {"other": 1},
                {"ettr": {"mean": 1.5}}, {"ettr": {"mean": float("nan")}}):
        step = _goodput(topo, **bad)
        assert (step.count, step.reason, step.basis) == (144, "simulate_invalid", "not_run"), bad
        assert step.note == "simulate.run has no ETTR or goodput in [0, 1]"
        assert step.source.endswith("no usable goodput figure")


def test_a_simulation_outside_its_contract_is_named_in_the_warnings(topo):
    v = V(topo).all_production().sim(ettr={"mean": 0.9}, job_gpus="many")
    (warning,) = [w for w in v.ledger().warnings if "simulate.run" in w]
    assert "is not applied" in warning and "job_gpus" in warning
    assert v.ledger().step("goodput").reason == "simulate_invalid"


def test_goodput_from_ettr_with_its_interval(topo):
    step = _goodput(topo, ettr={"mean": 0.9, "ci95": 0.05}, run_id="s-1", seed=4, days=2,
                    job_gpus=144, other=1)
    assert step.count == 129.6
    assert step.ci95 == [122.4, 136.8]
    assert step.lost == {"goodput_loss": 14.4}
    assert (step.reason, step.basis, step.note) == ("simulated_goodput", "simulated", "")
    assert step.provenance == {"run_id": "s-1", "seed": 4, "days": 2, "job_gpus": 144,
                               "failure_model": "llama3", "trials": 2, "ckpt_interval_min": 30,
                               "event_seq": 3, "fraction": 0.9, "figure": "ettr"}
    assert step.source == ("simulate.run s-1 (event seq 3): certified GPUs x ettr 0.900")
    assert _goodput(topo, ettr={"mean": 0.5, "ci95": [0.25, 0.75]}).ci95 == [36.0, 108.0]
    assert _goodput(topo, ettr={"mean": 0.5}).ci95 is None
    assert _goodput(topo, ettr={"mean": 0.5, "ci95": [0.2, "x"]}).ci95 is None
    assert _goodput(topo, ettr={"mean": 0.5, "ci95": [0.1, 0.2, 0.3]}).ci95 is None


def test_goodput_interval_ends_are_rounded_to_one_decimal(topo):
    assert _goodput(topo, ettr={"mean": 0.5, "ci95": [0.2211, 0.7777]}).ci95 == [31.8, 112.0]
    assert _goodput(topo, ettr={"mean": 0.7777}).count == 112.0  # 111.9888


def test_goodput_interval_is_clamped_to_the_certified_count(topo):
    assert _goodput(topo, ettr={"mean": 0.9, "ci95": 0.2}).ci95 == [100.8, 144.0]
    assert _goodput(topo, ettr={"mean": 0.1, "ci95": [-0.5, 0.2]}).ci95 == [0.0, 28.8]


def test_goodput_edges_and_plain_ettr(topo):
    assert _goodput(topo, ettr={"mean": 0.75}).count == 108.0
    assert _goodput(topo, ettr={"mean": 0.75}).ci95 is None
    for ettr, count in ((1.0, 144.0), (0.0, 0.0)):  # both ends of [0, 1] are an ETTR
        step = _goodput(topo, ettr={"mean": ettr})
        assert (step.count, step.reason, step.provenance["figure"]) == (
            count, "simulated_goodput", "ettr")


def test_goodput_falls_back_to_scheduling_times_runtime(topo):
    def split(**goodput: float):  # an ETTR out of range: the goodput split is used
        return _goodput(topo, ettr={"mean": 2.0}, goodput={"total": 0.4} | goodput)

    step = split(scheduling=0.5, runtime=0.8)
    assert step.count == 57.6
    assert step.provenance["figure"] == "goodput.scheduling x goodput.runtime"
    assert step.source.endswith("certified GPUs x goodput.scheduling x goodput.runtime 0.400")
    whole = split(scheduling=1.0, runtime=1.0)
    assert (whole.count, whole.reason) == (144.0, "simulated_goodput")  # 1.0 is in range
    none = split(scheduling=0.0, runtime=0.5)
    assert (none.count, none.reason) == (0.0, "simulated_goodput")  # so is 0.0
    assert split(scheduling=0.9, runtime=0.5).count == 64.8  # 0.45
    assert split(scheduling=2.0, runtime=0.6).reason == "simulate_invalid"
    assert split(scheduling=-1.0, runtime=0.5).reason == "simulate_invalid"


def test_goodput_notes_a_simulated_job_of_another_size(topo):
    step = _goodput(topo, ettr={"mean": 0.9}, job_gpus=432)
    assert step.note == "simulated job of 432 GPUs; its ETTR applied to the 144 certified GPUs"
    assert _goodput(topo, ettr={"mean": 0.9}, job_gpus=144).note == ""


def test_a_domain_fault_flags_every_tray_of_its_domain_only(topo):
    v = V(topo).all_production().run().finding(f"{R2}/s04", "nvlink_switch_degraded").passed()
    racks = {r["id"]: r for r in v.ledger().racks}
    assert all(t["flagged"] for t in racks[R2]["trays"])
    assert not any(t["flagged"] for t in racks[R1]["trays"])
    assert racks[R2]["healthy_gpus"] == 72 and racks[R2]["usable_gpus"] == 0


def test_job_shape_and_step_are_keyword_only():
    # A positional 64 could be read as the name or the GPUs per domain: refuse to guess.
    with pytest.raises(TypeError):
        JobShape("x", 64)  # type: ignore[misc]
    with pytest.raises(TypeError):
        Step("k", "label", 1.0, "r", "spec", "src")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Ledger([], JobShape(), [], [], [], [])  # type: ignore[misc]
    with pytest.raises(AttributeError):
        JobShape().gpus_per_domain = 8  # type: ignore[misc]


def test_the_default_shape_is_named_by_the_fleets_pools():
    from rackscale.fleet import FleetSpec

    def fleet(*templates: str) -> Topology:
        return Topology.build(FleetSpec.model_validate({"name": "f", "regions": [{
            "name": "r", "racks": [{"template": t, "count": 1} for t in templates]}]}))

    mixed = fleet("gb200-nvl72", "hgx-h100")
    assert JobShape().resolved(mixed).name == "whole-hgx-nodes + whole-nvl72-domains"
    assert JobShape().resolved(fleet("gb200-nvl72")).name == "whole-nvl72-domains"
    assert JobShape().resolved(fleet("hgx-h100", "hgx-b200")).name == "whole-hgx-nodes"
    # any other shape, or the default name with its own GPUs per domain, is kept as it is
    named = JobShape(name="mine", gpus_per_domain=None, required_stages=("domain",))
    assert named.resolved(mixed) is named
    sized = JobShape(gpus_per_domain=64)
    assert sized.resolved(mixed) is sized
    resolved = JobShape(required_stages=("gpu",)).resolved(mixed)
    assert resolved.required_stages == ("gpu",) and resolved.gpus_per_domain is None


def test_the_healthy_step_names_the_older_runs_evidence_still_stands_on(topo):
    def source(*older: tuple[str, str]) -> str:
        v = V(topo).all_production().run(run_id="c-9")
        for kind, run in older:
            if kind == "finding":
                v.finding(f"{R1}/c01/gpu0", "slow_gpu", run_id=run)
            else:
                v.view.results.append(v.ev(R2, "certify.result", {
                    "verdict": "pass", "run_id": run, "stages_passed": ["domain"]}))
        return v.ledger().step("healthy").source

    assert source().endswith("0 findings, 0 results")  # nothing older: nothing to say
    assert source(("finding", "c-9"), ("result", "c-9")).endswith("1 findings, 1 results")
    assert source(("finding", "c-1")).endswith(
        "; parts the run left out keep their newest evidence, of run c-1")
    # findings and results both count, each run once, in order
    assert source(("result", "c-2"), ("finding", "c-1"), ("finding", "c-2"),
                  ("result", "c-9")).endswith("newest evidence, of runs c-1, c-2")


def test_a_rack_counts_only_its_certified_domains(topo):
    v = V(topo).all_production().run().finding(f"{R2}/c03/gpu1", "gpu_dead").passed()
    racks = {r["id"]: r for r in v.ledger().racks}
    assert (racks[R1]["domains_certified"], racks[R1]["domains_healthy"]) == (1, 1)
    assert (racks[R2]["domains_certified"], racks[R2]["domains_healthy"]) == (0, 0)


def test_a_simulation_of_another_fleet_is_not_applied_and_says_so(topo):
    v = V(topo).all_production()
    v.view.other_simulation = v.ev("elsewhere", "simulate.run",
                                   SIM_BASE | {"fleet": "elsewhere", "ettr": {"mean": 0.5}})
    ledger = v.ledger()
    step = ledger.step("goodput")
    assert (step.count, step.reason, step.basis) == (144, "simulate_other_fleet", "not_run")
    assert step.note == "simulation is of fleet elsewhere"
    (warning,) = ledger.warnings
    assert "is of fleet 'elsewhere'" in warning and "goodput is not applied" in warning
    # with this fleet's own simulation too, that one is used and the warning says so
    v.sim(ettr={"mean": 0.5})
    ledger = v.ledger()
    assert ledger.step("goodput").count == 72.0
    (warning,) = ledger.warnings
    assert f"the latest one of {topo.spec.name} (seq {v.view.simulate_run.seq}) is used" \
        in warning


def test_a_simulation_of_another_size_or_of_one_pool_is_warned_of(topo):
    def warnings(**payload: Any) -> list[str]:
        return [w for w in V(topo).all_production().sim(ettr={"mean": 0.9}, **payload)
                .ledger().warnings if "simulate.run" in w]

    assert warnings(fleet_gpus=144) == []
    (other,) = warnings(fleet_gpus=288)
    assert "counted 288 GPUs" in other and "the loaded spec has 144" in other
    (pool,) = warnings(fleet_gpus=144, pool_gpus=72, pool="gb200-nvl72")
    assert "ran its job on pool gb200-nvl72 (72 of 144 GPUs)" in pool
    assert warnings(fleet_gpus=144, pool_gpus=144, pool="all") == []
    assert warnings(pool_gpus=72) == []  # no fleet figure: the pool is the whole of it


def test_goodput_notes_a_smaller_simulated_job_too(topo):
    step = _goodput(topo, ettr={"mean": 0.9}, job_gpus=72)
    assert step.note == "simulated job of 72 GPUs; its ETTR applied to the 144 certified GPUs"
