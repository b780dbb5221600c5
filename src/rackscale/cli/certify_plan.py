"""`rackscale certify plan`: the campaign the ladder would run, as a table, JSON, or
Kubernetes manifests (rendered only; nothing is applied to a cluster)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from rich.table import Table

from rackscale.certify import (
    STAGE_NAMES,
    CampaignPlan,
    K8sOptions,
    LadderConfig,
    plan_campaign,
    render_manifests,
    validate_manifests,
)
from rackscale.cli._common import check_out_dir, console, emit_json, say
from rackscale.fleet import Topology

HEADER = ("# rackscale certification campaign of fleet {fleet} as Kubernetes manifests.\n"
          "# RENDERED, NOT EXECUTED: nothing here was applied to a cluster or run.\n"
          "# The campaign of a healthy fleet: the batches that bisect a failing group are\n"
          "# decided at run time from the results before them and are not in this plan.\n"
          "# Apply the files in order, each after every Job of the one before completed.\n"
          "# {checked}\n")


def plan_dict(plan: CampaignPlan) -> dict[str, Any]:
    return {"fleet": plan.fleet, "rendered_not_executed": True,
            "fault_free_twin_findings": plan.findings,
            "stages": list(plan.config.stages), "scope": plan.config.scope,
            "batches": [{"order": b.order, "stage": b.stage, "probe": b.probe,
                         "nvlink": b.nvlink, "message_bytes": b.message_bytes,
                         "groups": [list(g) for g in b.groups]} for b in plan.batches]}


def _caveat(plan: CampaignPlan, prefix: str = "") -> str:
    """A fault-free fleet that does not pass its own model adds bisection batches: say so."""
    if not plan.findings:
        return ""
    return (f"{prefix}Caution: the fault-free twin of this fleet gave {plan.findings} "
            "findings, so this plan also holds the batches that bisect them.\n")


def print_plan(plan: CampaignPlan) -> None:
    table = Table(title=f"certification campaign of {plan.fleet} (planned, healthy fleet)")
    for col in ("batch", "stage", "probe", "NVLink", "tests", "GPUs per test"):
        table.add_column(col, justify="right" if col in ("batch", "tests") else "left")
    for b in plan.batches:
        sizes = sorted({len(g) for g in b.groups})
        nv = "" if b.nvlink is None else ("on" if b.nvlink else "off")
        table.add_row(str(b.order + 1), f"{b.stage} ({STAGE_NAMES[b.stage]})", b.probe, nv,
                      str(len(b.groups)), ", ".join(map(str, sizes)))
    console.print(table)
    console.print("Bisection batches of failing groups are decided at run time and are not "
                  "listed. Kubernetes manifests: --k8s")
    if plan.findings:
        console.print(_caveat(plan).strip())


def emit_k8s(topo: Topology, plan: CampaignPlan, opts: K8sOptions, *, out: str | None,
             version: str, check: bool) -> None:
    files = render_manifests(plan, topo, opts)
    checked = (f"Validated against the strict Kubernetes {version} schemas "
               f"({validate_manifests(files, version)} documents, kubernetes-validate)."
               if check else "Not validated (--no-validate).")
    header = HEADER.format(fleet=plan.fleet, checked=checked) + _caveat(plan, "# ")
    if out is None:
        sys.stdout.write(header)
        sys.stdout.write(yaml.safe_dump_all([d for _, docs in files for d in docs],
                                            sort_keys=False))
        return
    d = check_out_dir(out)
    d.mkdir(parents=True, exist_ok=True)
    for name, docs in files:
        (Path(d) / name).write_text(header + yaml.safe_dump_all(docs, sort_keys=False))
    jobs = sum(len(docs) for _, docs in files[1:])
    say(f"wrote {len(files)} files ({jobs} Indexed Jobs) to {d}, rendered, not "
        f"executed; apply them in file-name order. {checked}")


def run_plan(topo: Topology, config: LadderConfig, *, k8s: bool, opts: K8sOptions,
             out: str | None, version: str, check: bool, as_json: bool) -> None:
    plan = plan_campaign(topo, config)
    if k8s:
        emit_k8s(topo, plan, opts, out=out, version=version, check=check)
    elif as_json:
        emit_json(plan_dict(plan))
    else:
        print_plan(plan)
