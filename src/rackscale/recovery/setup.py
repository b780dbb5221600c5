"""A job's surroundings from the operator's options: its slots, runner, tiers and recorder."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rackscale.certify import Placement, loopback_placement
from rackscale.checkpoint import Retention, StoreSpec, TiersConfig, load_config
from rackscale.durable import write_atomic
from rackscale.recovery.launch import Launcher, LocalLauncher
from rackscale.recovery.record import Recorder
from rackscale.recovery.supervisor import JobSetup
from rackscale.registry import Registry, UnknownName
from rackscale.store import Store


class UnknownRunner(UnknownName):
    pass


@dataclass(frozen=True, slots=True)
class JobRunner:
    """How `--runner NAME` starts ranks (`launcher`) and which GPU slots it offers
    (`slots(launcher, n)`: the job's GPUs first, then its spares)."""

    launcher: Callable[[], Launcher]
    slots: Callable[[Launcher, int], Placement]


def _local_slots(_launcher: Launcher, n: int) -> Placement:
    return loopback_placement(job_slots(n))


def _slurm() -> Launcher:
    from rackscale.recovery.slurm import SlurmLauncher  # scontrol is asked only when chosen

    return SlurmLauncher()


def _slurm_slots(launcher: Launcher, n: int) -> Placement:
    from rackscale.recovery.slurm import SlurmLauncher

    if not isinstance(launcher, SlurmLauncher):
        raise TypeError("the slurm runner's slots come from a SlurmLauncher")
    return launcher.placement(n)


RUNNERS: Registry[JobRunner] = Registry("runner", error=UnknownRunner)
RUNNERS.add("local", JobRunner(LocalLauncher, _local_slots))
RUNNERS.add("slurm", JobRunner(_slurm, _slurm_slots))


def job_slots(n: int, region: str = "local", rack: str = "r01") -> list[str]:
    """GPU component ids for a job on this host: four GPUs per compute tray, c01 on."""
    return [f"{region}/{rack}/c{i // 4 + 1:02d}/gpu{i % 4}" for i in range(n)]


def job_tiers(job_dir: Path) -> TiersConfig:
    """The default tiers of a job: every tier a directory under the job directory; each slot
    gets its own local cache below `nodes/` (the trainer adds the slot's name)."""
    root = job_dir / "checkpoints"
    return TiersConfig(local_dir=str(root / "nodes"),
                       region=StoreSpec(name="region", kind="dir", path=str(root / "region")),
                       chunk_size=1 << 20, part_size=4 << 20,
                       retention=Retention(keep_local=2, keep_region=4, archive_every=0))


def build_setup(*, runner: str, job_dir: Path, slots: int, config: Path | None,
                db: str | None) -> JobSetup:
    if runner not in RUNNERS:
        raise UnknownRunner(f"--runner: {RUNNERS.unknown_message(runner)}")
    kind = RUNNERS[runner]
    launcher = kind.launcher()
    placement = kind.slots(launcher, slots)
    job_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        tiers, tiers_file = load_config(config), config.resolve()
    else:
        tiers, tiers_file = job_tiers(job_dir), job_dir / "tiers.json"
        write_atomic(tiers_file, tiers.model_dump_json(indent=2))
        os.chmod(tiers_file, 0o600)
    store = Store(db) if db else None
    return JobSetup(job=job_dir.name, job_dir=job_dir, tiers=tiers, tiers_file=tiers_file,
                    launcher=launcher, placement=placement,
                    recorder=Recorder(job_dir, store))
