"""The job-shape rows' rules, one decision per test (what `make mutation` scores
report/shapes.py against): the shapes a template supports from its own numbers, how many jobs
of each a domain holds on the ledger's evidence, which row is the headline, and the expected
goodput applied to each.

A mixed fleet on an in-memory store view: NVL72 rack a/r1 (18 trays of 4 GPUs, one NVLink
domain) and HGX rack a/h1 (4 nodes of 8 GPUs, each its own domain)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from rackscale.fleet import FleetSpec, RackTemplate, Topology
from rackscale.report import JobShape, StoreView, build_ledger
from rackscale.report.shapes import ShapeRule, job_shapes, shapes_for
from rackscale.store import Event

SPEC = FleetSpec.model_validate({"name": "shapes", "regions": [
    {"name": "a", "racks": [{"template": "gb200-nvl72", "names": ["r1"]},
                            {"template": "hgx-h100", "names": ["h1"]}]}]})
TOPO = Topology.build(SPEC)
R1, H1 = "a/r1", "a/h1"
NVL = next(r.template for r in TOPO.racks if r.id == R1)
HGX = next(r.template for r in TOPO.racks if r.id == H1)
TRAYS = [f"{R1}/c{i:02d}" for i in range(1, 19)]
NODES = [f"{H1}/n{i:02d}" for i in range(1, 5)]
SIM = {"run_id": "sim-t", "fleet": "shapes", "simulated": True, "job_gpus": 72, "days": 1.0,
       "trials": 2, "seed": 0, "failure_model": "llama3", "ckpt_interval_min": 30.0,
       "goodput": {"total": 0.4}}


class V:
    """A StoreView built event by event; every rack and tray in production."""

    def __init__(self) -> None:
        self.view = StoreView(store_url="sqlite:///t.db", topo=TOPO, fleet_event=None,
                              inventory_gpus=set(TOPO.gpu_ids), inventory_counts={})
        self.seq = 0
        for rack in TOPO.racks:
            self.state(rack.id, "production")

    def ev(self, cid: str, kind: str, payload: dict[str, Any]) -> Event:
        self.seq += 1
        return Event(seq=self.seq, time=datetime.now(UTC), component_id=cid, kind=kind,
                     payload=payload, actor="test", reason="")

    def state(self, cid: str, to: str) -> V:
        self.view.states[cid] = self.ev(cid, "lifecycle.transition", {"from": None, "to": to})
        return self

    def run(self) -> V:
        self.view.certify_run = self.ev("shapes", "certify.run",
                                        {"run_id": "c-1", "backend": "twin"})
        return self

    def bad(self, cid: str, kind: str = "gpu_dead") -> V:
        """A failing finding (the ledger applies findings of the certify run only)."""
        assert self.view.certify_run is not None
        self.view.findings.append(self.ev(cid, "certify.finding", {
            "component": cid, "kind": kind, "verdict": "fail", "run_id": "c-1", "backend": "twin",
            "stage": 1, "confidence": 1.0}))
        return self

    def result(self, cid: str, verdict: str = "pass", stages: tuple[Any, ...] = (1, 2, 3)) -> V:
        self.view.results.append(self.ev(cid, "certify.result", {
            "verdict": verdict, "stages_passed": list(stages)}))
        return self

    def all_pass(self, *, skip: tuple[str, ...] = ()) -> V:
        """A certify run with a passing result for every domain and tray (nodes are both)."""
        self.run()
        for cid in [R1, *TRAYS, *NODES]:
            if cid not in skip:
                self.result(cid)
        return self

    def sim(self, **payload: Any) -> V:
        self.view.simulate_run = self.ev("shapes", "simulate.run", SIM | payload)
        return self

    def rows(self, shape: JobShape | None = None) -> dict[str, dict[str, Any]]:
        return {r["name"]: r for r in job_shapes(self.view, build_ledger(self.view, shape))}

    def jobs(self, shape: JobShape | None = None) -> dict[str, int]:
        return {n: r["jobs"] for n, r in self.rows(shape).items()}


def tpl(base: RackTemplate, **kw: Any) -> RackTemplate:
    return dataclasses.replace(base, **kw)


def names(t: RackTemplate) -> list[str]:
    return [r.name for r in shapes_for(t)]


# ------------------------------------------------------------------------- the rules
def test_a_shape_rule_needs_positive_sizes_and_no_negative_trays_out() -> None:
    ok = {"name": "s", "template": "t", "label": "l", "scope": "domain"}
    ShapeRule(**ok, gpus_per_job=1, trays_per_job=1, trays_out=0)  # the smallest allowed
    for bad in ({"gpus_per_job": 0}, {"gpus_per_job": -4},
                {"gpus_per_job": 1, "trays_per_job": 0}, {"gpus_per_job": 1, "trays_per_job": -2},
                {"gpus_per_job": 1, "trays_out": -1}):
        with pytest.raises(ValueError, match="job shape s: sizes must be positive"):
            ShapeRule(**ok, **bad)


def test_a_shape_rule_is_keyword_only_and_immutable() -> None:
    with pytest.raises(TypeError):
        ShapeRule("s", "t", "l", "domain", 4)  # type: ignore[misc]
    rule = ShapeRule(name="s", template="t", label="l", scope="domain", gpus_per_job=4)
    assert (rule.trays_per_job, rule.trays_out, rule.gpus_per_unit) == (1, 0, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rule.gpus_per_job = 8  # type: ignore[misc]


# ----------------------------------------------------------------- shapes of a template
def test_an_nvl72_template_has_its_whole_domain_a_few_trays_out_one_tray_and_tray_pairs() \
        -> None:
    g, n, out = NVL.gpus_per_tray, NVL.trays, NVL.max_bad_trays
    keep = n - out
    got = [(r.name, r.scope, r.gpus_per_job, r.trays_per_job, r.trays_out, r.gpus_per_unit,
            r.label, r.template) for r in shapes_for(NVL)]
    assert got == [
        (NVL.whole_domain_shape, "domain", g * n, 1, 0, 0,
         f"whole {g * n}-GPU NVLink domain", NVL.name),
        (f"nvl72-domains-{keep}of{n}-trays", "domain", g * keep, 1, out, 0,
         f"{g * keep}-GPU jobs on {keep} of {n} trays (<= {out} trays out)", NVL.name),
        (f"tray-aligned-{g}gpu", "trays", g, 1, 0, 0, f"{g}-GPU jobs on one tray", NVL.name),
        (f"tray-pairs-{2 * g}gpu", "trays", 2 * g, 2, 0, 0,
         f"{2 * g}-GPU jobs on two trays of one domain", NVL.name)]
    assert (g, n, out) == (4, 18, 2)  # the figures the rows below are worked out with


def test_no_trays_out_allowed_means_no_partial_domain_shape() -> None:
    assert "nvl72-domains-18of18-trays" not in names(tpl(NVL, max_bad_trays=0))
    assert len(names(tpl(NVL, max_bad_trays=0))) == 3


def test_a_negative_trays_out_allowance_makes_no_partial_domain_shape() -> None:
    assert len(names(tpl(NVL, max_bad_trays=-1))) == 3


def test_one_tray_out_allowed_makes_a_partial_domain_shape() -> None:
    assert names(tpl(NVL, max_bad_trays=1))[1] == "nvl72-domains-17of18-trays"


def test_a_partial_domain_shape_keeps_at_least_one_tray() -> None:
    assert names(tpl(NVL, trays=3, max_bad_trays=2))[1] == "nvl72-domains-1of3-trays"
    assert len(names(tpl(NVL, trays=2, max_bad_trays=2))) == 3  # would keep none
    assert len(names(tpl(NVL, trays=2, max_bad_trays=3))) == 3  # would keep fewer than none


def test_tray_pairs_need_two_trays_in_the_domain() -> None:
    assert names(tpl(NVL, trays=2, max_bad_trays=0))[-1] == "tray-pairs-8gpu"
    assert names(tpl(NVL, trays=1, max_bad_trays=0)) == ["whole-nvl72-domains",
                                                          "tray-aligned-4gpu"]


def test_an_hgx_template_has_its_whole_node_and_half_nodes() -> None:
    g = HGX.gpus_per_tray
    got = [(r.name, r.scope, r.gpus_per_job, r.trays_per_job, r.trays_out, r.gpus_per_unit,
            r.label, r.template) for r in shapes_for(HGX)]
    assert got == [
        (HGX.whole_domain_shape, "domain", g, 1, 0, 0, f"whole {g}-GPU node (its NVLink domain)",
         HGX.name),
        (f"half-hgx-nodes-{g // 2}gpu", "trays", g // 2, 1, 0, g // 2,
         f"{g // 2}-GPU jobs on half a node", HGX.name)]
    assert g == 8


@pytest.mark.parametrize(("gpus", "half"), [(1, False), (2, True), (3, False), (6, True)])
def test_only_a_node_of_an_even_number_of_gpus_is_halved(gpus: int, half: bool) -> None:
    got = names(tpl(HGX, gpus_per_tray=gpus, nics_per_tray=gpus))
    assert got == ["whole-hgx-nodes"] + ([f"half-hgx-nodes-{gpus // 2}gpu"] if half else [])


# ------------------------------------------------------------------------- jobs per shape
def test_without_certification_every_healthy_domain_and_tray_holds_jobs() -> None:
    assert V().jobs() == {"whole-nvl72-domains": 1, "nvl72-domains-16of18-trays": 1,
                          "tray-aligned-4gpu": 18, "tray-pairs-8gpu": 9,
                          "whole-hgx-nodes": 4, "half-hgx-nodes-4gpu": 8}


def test_certified_gpus_are_jobs_times_gpus_per_job_and_whole_numbers() -> None:
    rows = V().all_pass().bad(f"{H1}/n01/gpu0").rows()
    for r in rows.values():
        assert r["certified_gpus"] == r["jobs"] * r["gpus_per_job"]
        assert r["expected_gpus"] == float(r["certified_gpus"])
    assert rows["half-hgx-nodes-4gpu"]["certified_gpus"] == 24
    # counts are integers: the report shows 24, not 24.0
    assert all(type(r[k]) is int for r in rows.values()
               for k in ("jobs", "certified_gpus", "gpus_per_job", "trays_out"))
    assert '"certified_gpus": 24,' in json.dumps(rows["half-hgx-nodes-4gpu"])


def test_one_tray_out_stops_the_whole_domain_not_the_partial_one() -> None:
    jobs = V().all_pass().bad(f"{R1}/c05/gpu1").jobs()
    assert (jobs["whole-nvl72-domains"], jobs["nvl72-domains-16of18-trays"]) == (0, 1)


def test_the_partial_domain_runs_with_exactly_its_trays_out_and_not_one_more() -> None:
    two = V().all_pass().bad(f"{R1}/c05/gpu1").bad(f"{R1}/c09/gpu0").jobs()
    three = V().all_pass().bad(f"{R1}/c05/gpu1").bad(f"{R1}/c09/gpu0").bad(f"{R1}/c12/gpu3").jobs()
    assert two["nvl72-domains-16of18-trays"] == 1
    assert three["nvl72-domains-16of18-trays"] == 0


def test_an_odd_number_of_good_trays_makes_whole_pairs_only() -> None:
    jobs = V().all_pass().bad(f"{R1}/c05/gpu1").jobs()
    assert (jobs["tray-aligned-4gpu"], jobs["tray-pairs-8gpu"]) == (17, 8)


def test_a_node_with_a_bad_gpu_holds_no_half_node_job() -> None:
    jobs = V().all_pass().bad(f"{H1}/n02/gpu7").jobs()
    assert (jobs["whole-hgx-nodes"], jobs["half-hgx-nodes-4gpu"]) == (3, 6)


def test_a_domain_wide_finding_stops_domain_jobs_but_not_tray_jobs() -> None:
    jobs = V().all_pass().bad(f"{R1}/s03", "nvlink_switch_down").jobs()
    assert (jobs["whole-nvl72-domains"], jobs["nvl72-domains-16of18-trays"]) == (0, 0)
    assert (jobs["tray-aligned-4gpu"], jobs["tray-pairs-8gpu"]) == (18, 9)
    assert jobs["whole-hgx-nodes"] == 4  # only the domain it is in


def test_a_finding_that_only_degrades_does_not_stop_domain_jobs() -> None:
    # power_shelf_down's action is "degrade" (other shelves carry the bus bar), which sorts
    # before "domain"
    jobs = V().all_pass().bad(R1, "power_shelf_down").jobs()
    assert (jobs["whole-nvl72-domains"], jobs["nvl72-domains-16of18-trays"]) == (1, 1)


def test_a_domain_wide_finding_outside_the_fleet_degrades_nothing() -> None:
    assert V().all_pass().bad("b/r7/s03", "nvlink_switch_down").jobs() == V().jobs()


def test_a_passing_certification_of_every_part_keeps_every_job() -> None:
    assert V().all_pass().jobs() == V().jobs()


def test_after_a_certify_run_a_domain_needs_its_own_pass() -> None:
    jobs = V().all_pass(skip=(R1, NODES[0])).jobs()
    assert (jobs["whole-nvl72-domains"], jobs["nvl72-domains-16of18-trays"]) == (0, 0)
    assert jobs["tray-aligned-4gpu"] == 18  # the trays passed
    assert jobs["whole-hgx-nodes"] == 3


@pytest.mark.parametrize("verdict", ["fail", "not_run"])  # every verdict but pass
def test_a_domain_whose_result_did_not_pass_holds_no_domain_job(verdict: str) -> None:
    v = V().all_pass(skip=(R1,)).result(R1, verdict)
    assert v.jobs()["whole-nvl72-domains"] == 0


def test_a_domain_that_passed_without_the_required_stage_holds_no_domain_job() -> None:
    v = V().all_pass(skip=(R1,)).result(R1, stages=(1, 2))
    assert v.jobs()["whole-nvl72-domains"] == 0
    assert V().all_pass(skip=(R1,)).result(R1, stages=(1, 2)).jobs(
        JobShape(required_stages=("gpu", "tray")))["whole-nvl72-domains"] == 1


def test_a_pass_with_no_stages_listed_passes_no_required_stage() -> None:
    v = V().all_pass(skip=(R1,))
    v.view.results.append(v.ev(R1, "certify.result", {"verdict": "pass"}))
    assert v.jobs()["whole-nvl72-domains"] == 0


@pytest.mark.parametrize("verdict", ["fail", "not_run", None])
def test_after_a_certify_run_a_tray_needs_its_own_pass(verdict: str | None) -> None:
    skip = (TRAYS[4], NODES[1])
    v = V().all_pass(skip=skip)
    if verdict is not None:
        for t in skip:
            v.result(t, verdict)
    jobs = v.jobs()
    assert (jobs["tray-aligned-4gpu"], jobs["tray-pairs-8gpu"]) == (17, 8)
    assert jobs["half-hgx-nodes-4gpu"] == 6
    assert jobs["whole-nvl72-domains"] == 1  # the domain's own result passed


def test_a_tray_must_be_both_healthy_and_passed() -> None:
    v = V().all_pass(skip=(TRAYS[4],)).result(TRAYS[4], "fail").bad(f"{R1}/c09/gpu0")
    assert v.jobs()["tray-aligned-4gpu"] == 16


# ----------------------------------------------------------------------- the headline
def test_by_default_each_templates_whole_domain_shape_is_the_headline() -> None:
    rows = V().rows()
    assert sorted(n for n, r in rows.items() if r["headline"]) == ["whole-hgx-nodes",
                                                                   "whole-nvl72-domains"]


@pytest.mark.parametrize(("gpus", "headline"), [(72, ["whole-nvl72-domains"]),
                                                (8, ["whole-hgx-nodes"]),
                                                (64, []),  # a partial domain is not
                                                (4, [])])  # nor are tray-aligned jobs
def test_a_job_shape_of_n_gpus_makes_the_whole_domain_shape_of_n_the_headline(
        gpus: int, headline: list[str]) -> None:
    rows = V().rows(JobShape(name="n", gpus_per_domain=gpus))
    assert sorted(n for n, r in rows.items() if r["headline"]) == headline


def test_rows_are_by_template_name_each_counting_its_own_domains_only() -> None:
    rows = job_shapes(V().view, build_ledger(V().view))
    assert [r["template"] for r in rows] == ["gb200-nvl72"] * 4 + ["hgx-h100"] * 2
    assert rows[0]["label"] == "whole 72-GPU NVLink domain"


def test_the_certified_steps_basis_goes_with_every_row() -> None:
    v = V()
    basis = build_ledger(v.view).step("certified").basis
    assert {r["basis"] for r in v.rows().values()} == {basis}
    assert {r["basis"] for r in V().all_pass().rows().values()} == {
        build_ledger(V().all_pass().view).step("certified").basis}
    assert basis != build_ledger(V().all_pass().view).step("certified").basis


# ------------------------------------------------------------------- expected goodput
def test_without_a_simulation_expected_gpus_are_the_certified_ones() -> None:
    row = V().rows()["whole-nvl72-domains"]
    assert (row["expected_gpus"], row["expected_ci95"], row["goodput_basis"]) == (
        72.0, None, "not_run")


def test_a_simulated_goodput_scales_each_row_to_one_decimal() -> None:
    rows = V().sim(ettr={"mean": 0.91234}).rows()
    assert rows["whole-nvl72-domains"]["expected_gpus"] == round(72 * 0.91234, 1) == 65.7
    assert rows["tray-aligned-4gpu"]["expected_gpus"] == round(72 * 0.91234, 1)
    assert rows["whole-hgx-nodes"]["expected_gpus"] == round(32 * 0.91234, 1)
    assert rows["whole-nvl72-domains"]["goodput_basis"] == "simulated"
    assert rows["whole-nvl72-domains"]["expected_ci95"] is None  # the run gave none


def test_the_goodput_interval_is_clipped_to_zero_and_one() -> None:
    low = V().sim(ettr={"mean": 0.05, "ci95": 0.1234}).rows()["whole-nvl72-domains"]
    assert low["expected_ci95"] == [0.0, round(72 * (0.05 + 0.1234), 1)]
    high = V().sim(ettr={"mean": 0.95, "ci95": 0.1234}).rows()["whole-nvl72-domains"]
    assert high["expected_ci95"] == [round(72 * (0.95 - 0.1234), 1), 72.0]


def test_the_goodput_interval_keeps_its_bounds_in_order() -> None:
    row = V().sim(ettr={"mean": 0.5, "ci95": [0.41234, 0.61234]}).rows()["whole-hgx-nodes"]
    assert row["expected_ci95"] == [round(32 * 0.41234, 1), round(32 * 0.61234, 1)]
    assert row["expected_ci95"] == [13.2, 19.6]


def test_a_simulation_outside_its_contract_is_not_applied() -> None:
    row = V().sim(ettr={"mean": 0.9}, job_gpus="many").rows()["whole-nvl72-domains"]
    assert (row["expected_gpus"], row["goodput_basis"]) == (72.0, "not_run")
