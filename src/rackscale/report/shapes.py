"""Job shapes side by side: how many GPUs each kind of job can use, from the same evidence.

The ledger certifies for one job shape (by default whole NVLink domains). Operators run
others: NVL72 jobs that tolerate a few trays out (64-GPU jobs on 16 of 18 trays), tray- or
node-aligned 4/8-GPU jobs, whole HGX nodes. Each shape here is derived from a rack template
(trays, GPUs per tray, `max_bad_trays`), never from fixed NVL72 numbers, so a mixed fleet gets
one row per template and shape. Counts use only what the ledger established: which trays are
healthy after the healthy step, which NVLink domains a domain-wide finding degrades, and the
certify.result of each domain and tray.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rackscale.fleet import RackTemplate
from rackscale.report.ledger import Ledger, stage_name
from rackscale.report.simulation import failure_goodput, simulation_of
from rackscale.report.storeview import StoreView
from rackscale.store import CertifyResultV1, SimulateRunV1

Scope = Literal["domain", "trays"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShapeRule:
    """One job shape on one rack template.

    `scope` "domain": one job per NVLink domain, using `gpus_per_job` GPUs, allowed when at
    most `trays_out` of the domain's trays are unhealthy. `scope` "trays": jobs of
    `trays_per_job` whole healthy trays (or nodes) inside one domain, as many as fit.
    """

    name: str
    template: str
    label: str
    scope: Scope
    gpus_per_job: int
    trays_per_job: int = 1
    trays_out: int = 0
    gpus_per_unit: int = 0  # "trays" scope on HGX: GPUs per job slice of a node (0 = whole)

    def __post_init__(self) -> None:
        if self.gpus_per_job <= 0 or self.trays_per_job <= 0 or self.trays_out < 0:
            raise ValueError(f"job shape {self.name}: sizes must be positive")


def shapes_for(t: RackTemplate) -> list[ShapeRule]:
    """The job shapes a template supports, from its own numbers."""
    g, n = t.gpus_per_tray, t.trays
    if t.domain_is_rack:
        out = [ShapeRule(name=t.whole_domain_shape, template=t.name, scope="domain",
                         gpus_per_job=g * n, label=f"whole {g * n}-GPU NVLink domain")]
        keep = n - t.max_bad_trays
        if t.max_bad_trays > 0 and keep > 0:
            out.append(ShapeRule(
                name=f"{t.shape}-domains-{keep}of{n}-trays", template=t.name, scope="domain",
                gpus_per_job=g * keep, trays_out=t.max_bad_trays,
                label=f"{g * keep}-GPU jobs on {keep} of {n} trays (<= {t.max_bad_trays} "
                      "trays out)"))
        out.append(ShapeRule(name=f"tray-aligned-{g}gpu", template=t.name, scope="trays",
                             gpus_per_job=g, label=f"{g}-GPU jobs on one tray"))
        if n >= 2:
            out.append(ShapeRule(name=f"tray-pairs-{2 * g}gpu", template=t.name, scope="trays",
                                 gpus_per_job=2 * g, trays_per_job=2,
                                 label=f"{2 * g}-GPU jobs on two trays of one domain"))
        return out
    out = [ShapeRule(name=t.whole_domain_shape, template=t.name, scope="domain",
                     gpus_per_job=g, label=f"whole {g}-GPU node (its NVLink domain)")]
    if g >= 2 and g % 2 == 0:
        out.append(ShapeRule(name=f"half-{t.shape}-nodes-{g // 2}gpu", template=t.name,
                             scope="trays", gpus_per_job=g // 2, gpus_per_unit=g // 2,
                             label=f"{g // 2}-GPU jobs on half a node"))
    return out


@dataclass(slots=True)
class _Domain:
    template: RackTemplate
    trays: list[str]
    healthy: list[bool]  # per tray: every GPU healthy after the ledger's healthy step
    tray_pass: list[bool]  # per tray: certify.result pass (True when certification not run)
    degraded: bool  # a domain-wide finding (NVLink switch) degrades the domain
    result_ok: bool  # the domain's certify.result passed the shape's required stages


def _domains(view: StoreView, ledger: Ledger) -> list[_Domain]:
    topo = view.topo
    healthy_tray = {t["id"]: t["healthy_gpus"] == t["gpus"] > 0
                    for r in ledger.racks for t in r["trays"]}
    degraded: set[int] = set()
    for f in ledger.findings:
        if f["action"] == "domain" and f["component"] in topo.index:
            degraded |= set(np.unique(topo.gpu_domain[topo.affected_gpus(f["component"])])
                            .tolist())
    results = {e.component_id: e.read(CertifyResultV1) for e in view.results}
    ran = view.certify_run is not None
    required = ledger.shape.required_stages
    # each domain's trays in topology order (a tray lies in one domain)
    trays, first = np.unique(topo.gpu_tray, return_index=True)
    tray_dom = topo.gpu_domain[first].tolist()
    trays_of: dict[int, list[int]] = {}
    for tray, d in zip(trays.tolist(), tray_dom, strict=True):
        trays_of.setdefault(d, []).append(tray)
    dom_first = {d: int(first[i]) for i, d in reversed(list(enumerate(tray_dom)))}
    out = []
    for d, dom_id in enumerate(topo.domains):
        tray_ids = [topo.ids[t] for t in trays_of.get(d, [])]
        if not tray_ids:
            continue
        rack = topo.racks[int(topo.gpu_rack[dom_first[d]])]
        out.append(_Domain(
            template=rack.template, trays=tray_ids,
            healthy=[healthy_tray.get(t, False) for t in tray_ids],
            tray_pass=[not ran or _verdict(results.get(t)) == "pass" for t in tray_ids],
            degraded=d in degraded,
            result_ok=not ran or _passed(results.get(dom_id), required)))
    return out


def _verdict(result: CertifyResultV1 | None) -> str | None:
    return None if result is None else result.verdict


def _passed(result: CertifyResultV1 | None, required: tuple[str, ...]) -> bool:
    if result is None or result.verdict != "pass":
        return False
    passed = {stage_name(x) for x in result.stages_passed}
    return all(s in passed for s in required)


def _jobs(rule: ShapeRule, d: _Domain) -> int:
    """How many jobs of `rule` one domain holds."""
    if rule.scope == "domain":
        out = len(d.trays) - sum(d.healthy)
        return int(not d.degraded and d.result_ok and out <= rule.trays_out
                   and len(d.trays) * d.template.gpus_per_tray >= rule.gpus_per_job)
    good = sum(h and p for h, p in zip(d.healthy, d.tray_pass, strict=True))
    if rule.gpus_per_unit:  # slices of a node: the node must be whole and healthy
        return good * (d.template.gpus_per_tray // rule.gpus_per_unit)
    return good // rule.trays_per_job


def job_shapes(view: StoreView, ledger: Ledger) -> list[dict[str, Any]]:
    """One row per (template, shape): jobs, certified GPUs and expected goodput."""
    templates = {r.template.name: r.template for r in view.topo.racks}
    domains = _domains(view, ledger)
    run = None if view.simulate_run is None else simulation_of(view.simulate_run)
    found = failure_goodput(run) if isinstance(run, SimulateRunV1) else None
    cert_basis = ledger.step("certified").basis
    headline_gpus = ledger.shape.gpus_per_domain
    rows = []
    for tname in sorted(templates):
        mine = [d for d in domains if d.template.name == tname]
        for rule in shapes_for(templates[tname]):
            jobs = sum(_jobs(rule, d) for d in mine)
            gpus = jobs * rule.gpus_per_job
            row: dict[str, Any] = {
                "name": rule.name, "template": tname, "label": rule.label,
                "gpus_per_job": rule.gpus_per_job, "trays_out": rule.trays_out,
                "jobs": jobs, "certified_gpus": gpus, "basis": cert_basis,
                "headline": rule.scope == "domain" and rule.trays_out == 0
                and (rule.name == templates[tname].whole_domain_shape if headline_gpus is None
                     else rule.gpus_per_job == headline_gpus),
                "expected_gpus": float(gpus), "expected_ci95": None,
                "goodput_basis": "not_run"}
            if found is not None:
                frac, ci, _ = found
                row |= {"expected_gpus": round(gpus * frac, 1), "goodput_basis": "simulated",
                        "expected_ci95": None if ci is None else
                        [round(gpus * max(0.0, ci[0]), 1), round(gpus * min(1.0, ci[1]), 1)]}
            rows.append(row)
    return rows
