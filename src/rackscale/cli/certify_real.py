"""Choosing the runner of `certify run --backend real`: where the fleet's ranks run."""

from __future__ import annotations

from pathlib import Path

from rackscale import lab
from rackscale.certify import (
    LocalRunner,
    Placement,
    Runner,
    loopback_placement,
    placement_from_places,
)
from rackscale.errors import UserError
from rackscale.fleet import Topology

RUNNERS = ("local", "slurm")


def lab_placement(topo: Topology, state_dir: Path) -> Placement | None:
    """The lab's placement when a lab of exactly this fleet is up in `state_dir`."""
    st = lab.load_state(state_dir)
    if st is None:
        return None
    plan = st.plan
    if st.status != "up":
        raise UserError(f"the lab in {state_dir} is {st.status}, not up. Fix: `rackscale lab "
                        "down`, then `rackscale lab up`")
    if plan.fleet != topo.spec.name or {r.gpu for r in plan.ranks} != set(topo.gpu_ids):
        raise UserError(f"the lab in {state_dir} was built for fleet {plan.fleet}, not "
                        f"{topo.spec.name}. Fix: certify with its fleet file "
                        f"({st.data.get('fleet_file')}) or rebuild the lab")
    return placement_from_places(lab.rank_places(plan),
                                 f"lab {plan.lab_id}: one network namespace per rank")


def real_runner(topo: Topology, name: str, lab_state: Path | None, *, concurrency: int,
                partition: str | None) -> Runner:
    """The runner of `certify run --backend real`. `lab_state` is the --lab the user gave,
    None when none was: then a lab up in the default directory is used when there is one, and
    the loopback otherwise. A --lab given must be an up lab: a typo must not certify the
    loopback in its place."""
    if name not in RUNNERS:
        raise UserError(f"unknown runner {name!r}; valid runners: {', '.join(RUNNERS)}")
    domain_of = topo.domain_of_gpus()
    if lab_state is not None:
        lab.require_up(lab_state, "certify run")
    placement = lab_placement(topo, lab_state or lab.DEFAULT_STATE_DIR)
    if name == "slurm":
        from rackscale.certify import SlurmRunner
        return SlurmRunner.from_environment(topo, placement, domain_of,
                                            concurrency=concurrency, partition=partition)
    if partition:
        raise UserError("--partition applies to --runner slurm only")
    if placement is None:
        if len(topo.gpu_ids) > 16:
            raise UserError(f"fleet {topo.spec.name} has {len(topo.gpu_ids)} GPUs; without a "
                            "lab, --runner local runs them all as processes on this host. Fix: "
                            "`rackscale lab up --fleet FILE` first, or use a fleet of <= 16 GPUs")
        placement = loopback_placement(topo.gpu_ids)
    return LocalRunner(placement, domain_of, concurrency=concurrency)
