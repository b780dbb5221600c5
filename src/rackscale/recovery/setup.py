"""A job's surroundings from the operator's options: its slots, runner, tiers and recorder.

`RUNNERS` is the one registry of `job run --runner` names. Each entry says how a rank starts
(its `Launcher`), whether its slots come from a `Site` the caller hands in (the lab's
placement and fleet: the CLI reads the lab, which this room does not import), and which
certify runner probes a suspect there (the targeted probe of `localize.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.certify import (
    SHARED_CPU_THRESHOLDS,
    Placement,
    Runner,
    Thresholds,
    loopback_placement,
)
from rackscale.checkpoint import Retention, StoreSpec, TiersConfig, load_config
from rackscale.errors import UserError
from rackscale.fleet import TEMPLATES, FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.recovery.launch import Launcher, LocalLauncher
from rackscale.recovery.localize import Localizer, on_runner
from rackscale.recovery.racks import CoolingConditions, HotRacks
from rackscale.recovery.record import Recorder, not_in_fleet
from rackscale.recovery.supervisor import JobSetup
from rackscale.registry import Registry, UnknownName
from rackscale.store import Store, loaded_spec


class UnknownRunner(UnknownName):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """Where a job's slots are: a fleet's topology and the placement of its GPUs' ranks, and
    (when the site knows) which of its racks have a cooling condition now."""

    topo: Topology
    placement: Placement
    cooling: CoolingConditions | None = None


ProbeRunner = Callable[[Site], Runner]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRunner:
    launcher: Callable[[], Launcher]
    site: str | None = None  # the option that supplies its Site (None: this host)
    # Slots the launcher itself offers, given how many are needed (Slurm: its nodes' GPUs)
    slots: Callable[[Launcher, int], Placement] | None = None
    probe: ProbeRunner | None = None  # runs the targeted probe of a straggler
    # CPU ranks on a shared host measure with the ladder's shared-CPU margins
    thresholds: Mapping[str, Thresholds] = field(
        default_factory=lambda: dict(SHARED_CPU_THRESHOLDS))
    # Why this runner cannot keep warm standbys (None: it can, and `job run` keeps them by
    # default); said when `--warm` is asked of it, and in `job run --help`.
    no_standbys: str | None = None


def _lab_probe(site: Site) -> Runner:
    from rackscale.certify import LocalRunner

    return LocalRunner(site.placement, site.topo.domain_of_gpus())


def _slurm() -> Launcher:
    from rackscale.recovery.slurm import SlurmLauncher  # scontrol is asked only when chosen

    return SlurmLauncher()


def _slurm_slots(launcher: Launcher, n: int) -> Placement:
    from rackscale.recovery.slurm import SlurmLauncher

    if not isinstance(launcher, SlurmLauncher):
        raise TypeError("the slurm runner's slots come from a SlurmLauncher")
    return launcher.placement(n)


RUNNERS: Registry[JobRunner] = Registry("runner", error=UnknownRunner)
RUNNERS.add("local", JobRunner(launcher=LocalLauncher))
RUNNERS.add("lab", JobRunner(launcher=LocalLauncher, site="--lab", probe=_lab_probe))
RUNNERS.add("slurm", JobRunner(
    launcher=_slurm, slots=_slurm_slots,
    # A standby would be an srun step of its own, holding its slot's GPU while the rank
    # there holds it too, and named by no rank, so stopping one would cancel the others.
    no_standbys="a standby would be a Slurm job step of its own, holding its GPU next to "
    "the rank on that GPU; --runner slurm starts each rank afresh"))


# The rack a job on this host (no fleet loaded) is numbered as: its slots get the ids this
# template's racks have (local/r01/c01/gpu0 ...), laid out by Topology as any fleet's are.
LOCAL_TEMPLATE = "gb200-nvl72"


def job_slots(n: int, region: str = "local", template: str = LOCAL_TEMPLATE) -> list[str]:
    """GPU component ids for a job on this host: the first `n` GPUs of a fleet of `template`
    racks in `region`, so the trays hold as many GPUs as that template's do."""
    t = TEMPLATES[template]
    racks = -(-n // (t.trays * t.gpus_per_tray))
    spec = FleetSpec(name=f"{region}-host", regions=[RegionSpec(name=region, racks=[
        RackGroup(template=template, count=racks)])])
    return Topology.build(spec).gpu_ids[:n]


def job_tiers(job_dir: Path) -> TiersConfig:
    """The default tiers of a job: every tier a directory under the job directory; each slot
    gets its own local cache below `nodes/` (the trainer adds the slot's name)."""
    root = job_dir / "checkpoints"
    return TiersConfig(local_dir=str(root / "nodes"),
                       region=StoreSpec(name="region", kind="dir", path=str(root / "region")),
                       chunk_size=1 << 20, part_size=4 << 20,
                       retention=Retention(keep_local=2, keep_region=4, archive_every=0))


def _local_slots(slots: int, fleet: Topology | None) -> list[str]:
    """This host's slots: the first GPUs of the store's fleet when one is loaded (so what the
    job finds is recorded on that fleet's parts), else ids of a rack of LOCAL_TEMPLATE."""
    if fleet is None:
        return job_slots(slots)
    if len(fleet.gpu_ids) < slots:
        raise UserError(f"fleet {fleet.spec.name} in the store has {len(fleet.gpu_ids)} GPUs; "
                        f"--job-gpus + --spares need {slots}. Fix: fewer ranks or spares")
    return fleet.gpu_ids[:slots]


def _placement(runner: str, spec: JobRunner, site: Site | None, slots: int,
               launcher: Launcher, fleet: Topology | None) -> Placement:
    if spec.slots is not None:
        return spec.slots(launcher, slots)
    if spec.site is None:
        return loopback_placement(_local_slots(slots, fleet))
    if site is None:
        raise UserError(f"--runner {runner} places ranks on the GPUs {spec.site} describes; "
                        f"give {spec.site} DIR of a lab that is up (`rackscale lab up`)")
    have = len(site.placement.ranks)
    if have < slots:
        raise UserError(f"--runner {runner}: {site.placement.describe} has {have} GPUs; "
                        f"--job-gpus + --spares need {slots}. Fix: fewer ranks or spares, or a "
                        "larger lab fleet")
    return site.placement


def build_setup(*, runner: str, job_dir: Path, slots: int, config: Path | None,
                db: str | None, site: Site | None = None) -> JobSetup:
    spec = RUNNERS[runner]
    launcher = spec.launcher()
    store = Store(db) if db else None
    loaded = loaded_spec(store) if store is not None else None
    fleet = Topology.build(loaded) if loaded is not None else None
    placement = _placement(runner, spec, site, slots, launcher, fleet)
    if fleet is not None and store is not None:
        # Refused before any rank starts: a finding on a slot outside the fleet is one
        # lifecycle can only note, never act on.
        for gpu in placement.ranks:
            if gpu not in fleet.index:
                raise not_in_fleet(gpu, fleet, store.safe_url)
    job_dir.mkdir(parents=True, exist_ok=True)
    # The supervisor writes the job's own copy (with its job id) for the ranks.
    tiers = load_config(config) if config is not None else job_tiers(job_dir)
    localizer = None
    if spec.probe is not None and site is not None:
        probe, where = spec.probe, site
        localizer = Localizer(site.topo, on_runner(site.topo, lambda: probe(where)),
                              spec.thresholds)
    hot_racks = None
    if site is not None and site.cooling is not None and spec.site is not None:
        # The rack of each slot from the site's topology, so a cooled rack's slots leave the
        # job together (recovery/racks.py)
        hot_racks = HotRacks(rack_of={s: site.topo.gpu_place(s).rack for s in placement.ranks},
                             conditions=site.cooling)
    return JobSetup(job=job_dir.name, job_dir=job_dir, tiers=tiers,
                    launcher=launcher, placement=placement,
                    recorder=Recorder(job_dir, store, fleet=fleet),
                    localizer=localizer, hot_racks=hot_racks)
