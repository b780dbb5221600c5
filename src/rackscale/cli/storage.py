"""Where measured storage meets the simulator: `checkpoint profile`, `simulate run|sweep
--storage`, and `simulate storage-whatif`.

The checkpoint room measures (a profile file); the simulate room takes seconds
(`StorageTimes`). This module turns the one into the other: it loads and checks the profile,
scales its fitted figures to the job's checkpoint share per node, and prints the what-if.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.checkpoint import (
    StorageProfile,
    TiersConfig,
    load_profile,
    measure_profile,
    parse_size,
)
from rackscale.cli._common import (
    check_out_dir,
    check_out_file,
    console,
    emit_json,
    json_safe,
    say,
    seed_option,
)
from rackscale.cli.fleet import resolve_spec
from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.simulate import (
    SIMULATED_WHATIF,
    FleetShape,
    SimConfig,
    SimResult,
    StorageTimes,
    make_config,
    plan,
    scale_fits,
    storage_figures,
    storage_whatif,
)
from rackscale.store import Kind, Store

StorageOpt = typer.Option(None, "--storage", metavar="PROFILE", help="A measured storage "
                          "profile (`rackscale checkpoint profile`): blocking save cost and "
                          "restore time per failure from it (replaces --ckpt-cost-s).")
CkptSizeOpt = typer.Option(None, "--ckpt-size", help="The job's whole checkpoint (e.g. 5TB); "
                           "each node saves its share. Default: the profile's largest size "
                           "per node.")
RegionLossOpt = typer.Option(0.0, "--region-loss-per-year", help="Region-wide outages "
                             "(power, network) per year, with --storage (assumption).")
OutageOpt = typer.Option(24.0, "--region-outage-h", help="Hours a lost region stays down "
                         "(what a job without replication waits), with --storage.")
CacheOpt = typer.Option(True, "--local-cache/--no-local-cache",
                        help="Restore from the local NVMe cache when the node survived.")
ReplOpt = typer.Option(True, "--replication/--no-replication",
                       help="Replicate to another region (restart there on a region loss).")


def _bar(disable: bool) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                    TimeElapsedColumn(), console=console, transient=True, disable=disable)


# ------------------------------------------------------------------------ checkpoint profile
PROFILE_NAME = "storage-profile.json"


def run_profile(cfg: TiersConfig, sizes: list[str], reps: int, out: Path, json_out: bool) -> None:
    target = check_out_file(check_out_dir(out) / PROFILE_NAME)
    parsed = [parse_size(s) for s in sizes]
    with _bar(json_out) as bar:
        task = bar.add_task("profiling the tiers", total=None)

        def tick(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        prof = measure_profile(cfg, parsed, reps=reps, progress=tick)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, prof.model_dump_json(by_alias=True, indent=2) + "\n")
    if json_out:
        emit_json({"profile": str(target), "fits": prof.fits(),
                   **prof.model_dump(mode="json", by_alias=True)})
        return
    print_profile(prof)
    say(f"wrote {target}")


def print_profile(prof: StorageProfile) -> None:
    console.print(f"[bold]measured[/] on {prof.host}, {prof.started_at:%Y-%m-%d %H:%M:%S} UTC; "
                  "medians of the runs")
    t = Table(title="save (from the save call, seconds, measured)")
    for col in ("size", "stall", "local", "region", "replicated", "archived"):
        t.add_column(col, justify="right")
    for p in prof.points:
        s = p.save
        figs = [s.stall, s.local, s.region, s.replicated, s.archived]
        t.add_row(_size(p.bytes) + (" (probe)" if p.probe else ""),
                  *(f"{f.seconds:.4f}" if f else "-" for f in figs))
    console.print(t)
    r = Table(title="restore of the whole checkpoint from each tier (seconds and throughput, "
                    "measured)")
    r.add_column("size", justify="right")
    for tier in prof.tiers:
        r.add_column(f"{tier.name} ({tier.role})", justify="right")
    for p in prof.points:
        r.add_row(_size(p.bytes), *(
            f"{p.restore[t.name].seconds:.4f} ({_size(int(p.bytes / p.restore[t.name].seconds))}"
            "/s)" if p.restore[t.name].seconds > 0 else "0" for t in prof.tiers))
    console.print(r)
    f = Table(title="fitted model t(S) = latency + S / bandwidth (from the measured points)")
    for col in ("figure", "latency ms", "bandwidth MB/s", "latency-bound below"):
        f.add_column(col, justify="right")
    for key, fit in prof.fits().items():
        bw = fit["bandwidth_Bps"]
        f.add_row(key, f"{fit['latency_s'] * 1e3:.2f}",
                  f"{bw / 1e6:.0f}" if bw != float("inf") else "-",
                  _size(int(fit["crossover_bytes"])) if bw != float("inf") else "-")
    console.print(f)


def _size(n: int) -> str:
    for unit, k in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n} B"


# ------------------------------------------------------------------------ simulate --storage
def job_storage(cfg: SimConfig, shape: FleetShape, profile: Path, ckpt_size: str | None,
                **rules: Any) -> StorageTimes:
    """The profile's figures scaled to this job: each node (tray) saves its share."""
    prof = load_profile(profile)
    p = plan(cfg, shape)
    nodes = p.units_job * (p.unit_trays - p.spare_trays)
    if ckpt_size is None:
        shard = max(pt.bytes for pt in prof.points if not pt.probe) if any(
            not pt.probe for pt in prof.points) else prof.points[-1].bytes
        how = "the profile's largest size per node"
    else:
        total = parse_size(ckpt_size, option="--ckpt-size", limit=1 << 60)
        shard = max(1, total // nodes)
        how = f"{ckpt_size} over {nodes} nodes"
    if rules.get("replication", True) and rules.get("region_loss_per_year", 0) > 0 and \
            prof.tier("replica") is None:
        raise UserError(f"{profile}: the profile has no other-region tier (role 'replica'), so "
                        "a region loss with replication cannot be simulated: profile tiers "
                        "with a replica, or pass --no-replication")
    try:
        return scale_fits(prof.fits(), shard, **rules,
                          source=f"profile {profile} measured {prof.started_at:%Y-%m-%d %H:%M}"
                                 f" UTC on {prof.host}; {how}")
    except ValueError as err:
        raise UserError(f"{profile}: {err}") from None


def with_storage(cfg: SimConfig, shape: FleetShape, profile: Path | None, ckpt_size: str | None,
                 **rules: Any) -> SimConfig:
    """`cfg` with the profile's storage times (and their blocking cost), or as it is."""
    if profile is None:
        if ckpt_size is not None or rules.get("region_loss_per_year"):
            raise UserError("--ckpt-size and --region-loss-per-year need --storage PROFILE")
        return cfg
    st = job_storage(cfg, shape, profile, ckpt_size, **rules)
    return make_config(**(cfg.model_dump() | {"storage": st,
                                              "ckpt_cost_s": st.save_stall_s}))


def label_storage(result: SimResult, cfg: SimConfig) -> SimResult:
    """A run's result with the storage figures it used (measured, then scaled) and the RPO."""
    if cfg.storage is None:
        return result
    st = cfg.storage
    return result.with_(storage=storage_figures(st) | {
        "blocking_s": st.blocking_s(cfg.ckpt_interval_min * 60),
        "rpo_region_loss_s": st.rpo_region_loss_s(cfg.ckpt_interval_min * 60),
        "local_cache": st.local_cache, "replication": st.replication})


def print_storage(r: SimResult) -> None:
    st = r.storage
    if not st:
        return
    console.print(f"storage figures {st['basis']}: blocking save {st['blocking_s']:.2f} s, "
                  f"restore local {st['restore_local_s']:.1f} s / region "
                  f"{st['restore_region_s']:.1f} s; local cache "
                  f"{'on' if st['local_cache'] else 'off'}, replication "
                  f"{'on' if st['replication'] else 'off'}; RPO on a region loss "
                  f"{st['rpo_region_loss_s'] / 60:.1f} min")


@dataclass(frozen=True, slots=True)
class StorageOptions:
    """`--storage` and the options that price it, as `simulate run` and `sweep` take them."""

    storage: Path | None
    ckpt_size: str | None
    local_cache: bool
    replication: bool
    region_loss_per_year: float
    region_outage_h: float


def storage_config(cfg: SimConfig, shape: FleetShape, o: StorageOptions) -> SimConfig:
    """`cfg` with --storage and its options applied."""
    return with_storage(cfg, shape, o.storage, o.ckpt_size, local_cache=o.local_cache,
                        replication=o.replication, region_loss_per_year=o.region_loss_per_year,
                        region_outage_h=o.region_outage_h)


# ------------------------------------------------------------------------ storage-whatif
# The what-if's own options (the simulator's shared ones are generated from its config).
WhatifDaysOpt = typer.Option(30.0, "--days", help="Simulated wall-clock days.")
WhatifTrialsOpt = typer.Option(100, "--trials", help="Monte Carlo trials.")
WhatifSeedOpt = seed_option(0, "the failures (same seed, same failures)")
WhatifModelOpt = typer.Option("llama3", "--failure-model",
                              help="llama3 (Table 5), rsc-1 or rsc-2 (Meta RSC r_f).")
WhatifRestartOpt = typer.Option(5.0, "--restart-min", help="Restart overhead u0 besides the "
                                "restore, minutes.")
WhatifStorageOpt = typer.Option(..., "--storage", metavar="PROFILE",
                                help="A measured storage profile (checkpoint profile).")
WhatifIntervalsOpt = typer.Option("5,10,15,20,30,45,60", "--intervals-min",
                                  help="Checkpoint intervals to compare, minutes.")
WhatifRefOpt = typer.Option(30.0, "--ckpt-interval-min", help="The interval the cache and "
                            "replication are priced at, minutes.")
WhatifRegionLossOpt = typer.Option(1.0, "--region-loss-per-year",
                                   help="Region-wide outages per year (assumption).")
PriceOpt = typer.Option(2.0, "--gpu-hour-price", help="Money per GPU-hour.")
WhatifRecordOpt = typer.Option(False, "--record", help="Store a simulate.storage_whatif "
                               "event (--db): the report's storage section shows it.")


@dataclass(frozen=True, slots=True, kw_only=True)
class WhatifRequest:
    """`simulate storage-whatif`'s options, typed (the command's defaults are its options')."""

    storage: Path
    fleet: str | None
    pool: str | None
    job_gpus: int | None
    ckpt_size: str | None
    days: float
    trials: int
    seed: int
    failure_model: str
    intervals: str  # minutes, comma-separated
    ckpt_interval: float
    restart: float
    region_loss_per_year: float
    region_outage: float
    gpu_hour_price: float
    record: bool
    db: str | None
    as_json: bool


def run_whatif(o: WhatifRequest) -> None:
    """`simulate storage-whatif`: same failures with and without cache and replication."""
    try:
        ivs = [float(v) for v in o.intervals.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--intervals-min must be numbers separated by commas; got "
                        f"{o.intervals!r}") from None
    shape = FleetShape.from_spec(resolve_spec(o.fleet, o.db), o.pool)
    base = make_config(job_gpus=shape.gpus if o.job_gpus is None else o.job_gpus, days=o.days,
                       trials=o.trials, seed=o.seed, failure_model=o.failure_model,
                       ckpt_interval_min=o.ckpt_interval, restart_min=o.restart,
                       straggler_ratio=0)
    st = job_storage(base, shape, o.storage, o.ckpt_size,
                     region_loss_per_year=o.region_loss_per_year,
                     region_outage_h=o.region_outage)
    rec = Store(o.db) if o.record else None  # a bad --db fails before the run
    with _bar(o.as_json) as bar:
        task = bar.add_task("what-if over setups and intervals", total=1)
        result = storage_whatif(base, shape, st, ivs, gpu_hour_price=o.gpu_hour_price,
                                progress=lambda d, t: bar.update(task, completed=d, total=t))
    if rec is not None:
        rec.append_event(shape.name, Kind.SIMULATE_STORAGE_WHATIF, json_safe(result), actor="cli",
                         reason="rackscale simulate storage-whatif")
    if o.as_json:
        emit_json(result)
        return
    print_whatif(result)


def print_whatif(r: dict[str, Any]) -> None:
    console.print(f"[bold]{SIMULATED_WHATIF}[/]")
    console.print(f"storage figures: {r['storage']['basis']}")
    console.print(f"job {r['job_gpus_allocated']} GPUs, {r['days']:g} days x {r['trials']} "
                  f"trials, {r['failure_model']}, job MTBF {r['job_mtbf_h'] * 60:.1f} min; "
                  f"region losses {r['storage']['region_loss_per_year']:g}/year (assumption)")
    rpo = r["rpo_region_loss_s"]
    console.print(f"RPO on a region loss at {r['reference_interval_min']:g} min: "
                  f"{rpo['with replication'] / 60:.1f} min with replication (then restart in "
                  f"the other region), {rpo['without replication'] / 60:.1f} min of work "
                  f"without it, after waiting {r['storage']['region_outage_h']:g} h for the "
                  "region (from measured times)")
    t = Table(title="per setup: the best interval found vs Young/Daly (simulated)")
    for col in ("setup", "best interval min", "ETTR ± 95% CI", "Young/Daly min",
                f"lost GPU-h @{r['reference_interval_min']:g} min", "cost"):
        t.add_column(col, justify="right")
    ref = r["reference_interval_min"]
    for name, s in r["setups"].items():
        at = next(p for p in s["points"] if p["interval_min"] == ref)
        best = s["optimal_interval_min"]
        edge = " (edge: widen --intervals-min)" if best in (min(r["intervals_min"]),
                                                        max(r["intervals_min"])) else ""
        fit = s.get("fitted_optimum_min")
        fitted = f" (fit {fit:.1f})" if fit is not None and not edge else ""
        t.add_row(name, f"{best:g}{edge}{fitted}",
                  f"{s['optimal_ettr']['mean']:.4f} ± {s['optimal_ettr']['ci95']:.4f}",
                  f"{s['young_min']:.1f} / {s['daly_min']:.1f}",
                  f"{at['lost_gpu_hours']['mean']:,.0f} ± {at['lost_gpu_hours']['ci95']:,.0f}",
                  f"{at['lost_cost']['mean']:,.0f}")
    console.print(t)
    b = Table(title=f"what it buys per 30-day month at {ref:g} min (paired, simulated)")
    for col in ("", "GPU-hours ± 95% CI", f"money @ {r['gpu_hour_price']:g}/GPU-h"):
        b.add_column(col, justify="right")
    for what, v in r["buys_per_month"].items():
        b.add_row(what, f"{v['gpu_hours']['mean']:,.0f} ± {v['gpu_hours']['ci95']:,.0f}",
                  f"{v['money']['mean']:,.0f} ± {v['money']['ci95']:,.0f}")
    console.print(b)
