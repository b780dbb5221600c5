"""`rackscale simulate ...`: ETTR and goodput of a training job under failures (simulated).

`run` simulates one policy; `sweep` one policy parameter over values, writing a CSV and a PNG
with the Young/Daly interval beside the optimum found. `step_simulate` is the demo's step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.cli._common import (
    DbOption,
    FleetOption,
    JsonOption,
    check_out_dir,
    console,
    emit_json,
    noun,
    out_dir_option,
    say,
)
from rackscale.cli._options import CONFIG, ConfigOption, config_options
from rackscale.cli._pipeline import DemoContext, SimulateStepResult
from rackscale.cli.fleet import resolve_spec
from rackscale.cli.storage import (
    CacheOpt,
    CkptSizeOpt,
    OutageOpt,
    PriceOpt,
    RegionLossOpt,
    ReplOpt,
    StorageOpt,
    StorageOptions,
    WhatifDaysOpt,
    WhatifIntervalsOpt,
    WhatifModelOpt,
    WhatifRecordOpt,
    WhatifRefOpt,
    WhatifRegionLossOpt,
    WhatifRequest,
    WhatifRestartOpt,
    WhatifSeedOpt,
    WhatifStorageOpt,
    WhatifTrialsOpt,
    label_storage,
    print_storage,
    run_whatif,
    storage_config,
)
from rackscale.errors import UserError
from rackscale.simulate import (
    SIMULATED,
    SWEEPS,
    FleetShape,
    RecoveryFileError,
    SimConfig,
    SimResult,
    incidents_from_file,
    make_config,
    measured_recovery,
    plan,
    run,
    sweep,
    sweep_payload,
    with_recovery,
    write_csv,
    write_png,
)
from rackscale.store import DEFAULT_DATA_DIR, Kind, RecoveryIncidentV1, Store

app = noun("Simulated training jobs under failures: ETTR, goodput, policy sweeps.")

JobOpt = typer.Option(None, "--job-gpus", help="GPUs the job needs (default: its whole pool).")
PoolOpt = typer.Option(None, "--pool", help="What the job runs on in a mixed fleet: a rack "
                       "template or a GPU SKU (default: the largest by GPUs).")
# SimConfig field -> its command-line option. Defaults and types come from SimConfig itself
# (one place); `run` and `sweep` take the same options.
SIM_OPTIONS = {
    "days": ConfigOption("--days", "Simulated wall-clock days."),
    "trials": ConfigOption("--trials", "Monte Carlo trials."),
    "seed": ConfigOption("--seed", "Random seed of the failures (same seed, same failures).",
                         {"min": 0}),
    "failure_model": ConfigOption("--failure-model",
                                  "llama3 (Table 5), rsc-1 or rsc-2 (Meta RSC r_f)."),
    "ckpt_interval_min": ConfigOption("--ckpt-interval-min", "Checkpoint interval, minutes."),
    "ckpt_cost_s": ConfigOption("--ckpt-cost-s", "Blocking checkpoint write, seconds."),
    "restart_min": ConfigOption("--restart-min", "Restart overhead u0, minutes."),
    "start_min": ConfigOption("--start-min", "Minutes from launch to the job's first step, "
                              "counted as restart time."),
    "detect_min": ConfigOption("--detect-min", "Detection latency, minutes, for every cause "
                               "(default: per cause)."),
    "align": ConfigOption("--align", "domain: whole NVLink domains; tray: any trays."),
    "spare_domains": ConfigOption("--spare-domains", "Hot-spare units (racks/nodes; trays "
                                  "with --align tray). Default: all the job leaves free."),
    "spare_trays": ConfigOption("--spare-trays", "Hot-spare trays kept idle in each domain."),
    "escalate_at": ConfigOption("--escalate-at", "Trays out that send a whole rack to repair "
                                "(0: never). Default: the rack template's rule (3 for NVL72)."),
    "straggler_ratio": ConfigOption("--straggler-ratio",
                                    "Fail-slow rate as a fraction of the fail-stop rate."),
    "straggler_slowdown": ConfigOption("--straggler-slowdown",
                                       "Job slowdown while a straggler runs."),
    "straggler_detect_min": ConfigOption("--straggler-detect-min", "Straggler detection, minutes."),
    "rate_scale": ConfigOption("--rate-scale", "Multiply every failure rate."),
    "repair_scale": ConfigOption("--repair-scale", "Multiply every per-cause repair time."),
    "rack_repair_h": ConfigOption("--rack-repair-h", "Whole-rack repair after escalation, h."),
    "mfu": ConfigOption("--mfu", "Program goodput's model-FLOPs utilisation factor."),
}


RecoveryOpt = typer.Option(
    None, "--recovery", metavar="FILE", show_default=False,
    help="Use the measured restart cost of `rackscale job incidents --json` output (median "
         "fault-to-running time) instead of --restart-min and --detect-min.")
RecoveryStoreOpt = typer.Option(
    False, "--recovery-from-store", help="Same, from the recovery incidents in the --db store.")


def _measured_recovery(path: Path | None, from_store: bool,
                       db: str | None) -> dict[str, Any] | None:
    if path is not None and from_store:
        raise RecoveryFileError("--recovery and --recovery-from-store: give one of them")
    if path is not None:
        return measured_recovery(incidents_from_file(path), str(path))
    if not from_store:
        return None
    store = Store(db, readonly=True)
    try:
        rows = [e.read(RecoveryIncidentV1).dump()
                for e in store.events(kind=Kind.RECOVERY_INCIDENT)]
        return measured_recovery(rows, f"store {store.safe_url}")
    finally:
        store.close()


def _config(fleet: FleetShape, job_gpus: int | None, config: dict[str, Any]) -> SimConfig:
    """The validated config from a command's SimConfig options (`config`); the whole pool
    when no --job-gpus is given."""
    return make_config(job_gpus=fleet.gpus if job_gpus is None else job_gpus, **config)


def _fleet(fleet: str | None, db: str | None, pool: str | None) -> FleetShape:
    return FleetShape.from_spec(resolve_spec(fleet, db), pool)


def _progress(disable: bool) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), TaskProgressColumn(),
                    TimeElapsedColumn(), console=console, transient=True, disable=disable)


@app.command("run")
@config_options(SimConfig, SIM_OPTIONS)
def run_cmd(
    fleet: str | None = FleetOption, pool: str | None = PoolOpt, job_gpus: int | None = JobOpt,
    config: dict[str, Any] = CONFIG,
    storage: Path | None = StorageOpt, ckpt_size: str | None = CkptSizeOpt,
    region_loss_per_year: float = RegionLossOpt, region_outage: float = OutageOpt,
    local_cache: bool = CacheOpt, replication: bool = ReplOpt,
    recovery: Path | None = RecoveryOpt, recovery_from_store: bool = RecoveryStoreOpt,
    record: bool = typer.Option(False, "--record", help="Store a simulate.run event (--db)."),
    db: str | None = DbOption, as_json: bool = JsonOption,
) -> None:
    """Simulate a job on a fleet under failures: ETTR, goodput, MTTF, losses (Monte Carlo)."""
    shape = _fleet(fleet, db, pool)
    cfg = storage_config(_config(shape, job_gpus, config), shape, StorageOptions(
        storage, ckpt_size, local_cache, replication, region_loss_per_year, region_outage))
    cfg, used = with_recovery(cfg, _measured_recovery(recovery, recovery_from_store, db))
    plan(cfg, shape)  # bad shapes fail before the progress bar appears
    store = Store(db) if record else None  # a bad --db fails before the simulation runs
    with _progress(as_json) as bar:
        task = bar.add_task(f"simulating {cfg.trials} trials x {cfg.days:g} days", total=1.0)
        result = run(cfg, shape, progress=lambda f: bar.update(task, completed=f))
    result = label_storage(result, cfg).with_(recovery=used)
    if store is not None:
        store.append_event(shape.name, Kind.SIMULATE_RUN, result.payload(),
                           actor="cli", reason="rackscale simulate run")
    if as_json:
        emit_json(result.as_dict())
        return
    print_result(result)


def print_recovery(used: dict[str, Any] | None) -> None:
    if not used:
        return
    if used["basis"] == "measured":
        console.print(f"restart cost measured: {used['restart_cost_s']:.2f} s (median fault to "
                      f"running again of {used['incidents']} incidents, {used['source']}); "
                      "detection inside it")
    else:
        detect = "per cause" if used["detect_min"] is None else f"{used['detect_min']:g} min"
        console.print(f"restart cost assumed: {used['restart_min']:g} min (--restart-min), "
                      f"detection {detect} (--detect-min)")


def print_result(r: SimResult, *, causes: int = 8) -> None:
    e, g, gc = r.ettr, r.goodput, r.goodput_ci95
    console.print(f"[bold]{SIMULATED}[/]")
    units = "domains" if r.align == "domain" else "trays"
    alloc = r.job_gpus_allocated
    # The job holds whole units: say so when that rounds the request up (100 -> 144 GPUs).
    job = (f"{r.job_gpus} GPUs" if alloc == r.job_gpus else
           f"{r.job_gpus} GPUs requested, {alloc} allocated as whole {units}")
    where = f"fleet {r.fleet} ({r.fleet_gpus} GPUs)"
    if r.pool_gpus != r.fleet_gpus:
        where = (f"pool {r.pool} ({r.pool_gpus} of the {r.fleet_gpus} GPUs of fleet "
                 f"{r.fleet}; choose with --pool)")
    console.print(
        f"job {job} ({r.units_job} {units}, {r.units_spare} spare) "
        f"on {where}, "
        f"{r.days:g} days x {r.trials} trials, failure model {r.failure_model}, "
        f"checkpoint every {r.ckpt_interval_min:g} min ({r.ckpt_cost_s:g} s blocking)")
    print_storage(r)
    print_recovery(r.recovery)
    console.print(f"ETTR [bold]{e.mean:.4f}[/] ± {e.ci95:.4f} (95% CI)")
    console.print(
        "goodput = scheduling x runtime x program = "
        f"{g.scheduling:.4f} x {g.runtime:.4f} x {g.program:.4f} = "
        f"[bold]{g.total:.4f}[/] ± {gc['total']:.4f}")
    console.print(f"job MTTF {r.job_mttf_h:.2f} h (model {r.job_mtbf_model_h:.2f} h); "
                  f"interruptions {r.interruptions.mean:.1f} ± "
                  f"{r.interruptions.ci95:.1f} per trial; rack escalations "
                  f"{r.rack_escalations:.2f}; Young/Daly interval {r.young_min:.1f}/"
                  f"{r.daly_min:.1f} min")
    t = Table(title="interruptions per trial by cause (simulated)")
    t.add_column("cause")
    t.add_column("per trial", justify="right")
    top = sorted(r.interruptions_by_cause.items(), key=lambda kv: -kv[1])
    for name, n in top[:causes]:
        t.add_row(name, f"{n:.2f}")
    lost = Table(title="hours lost per trial by cause (simulated)")
    lost.add_column("cause")
    lost.add_column("hours", justify="right")
    for name, hours in r.lost_hours_by_cause.items():
        lost.add_row(name, f"{hours:.1f}")
    console.print(t)
    console.print(lost)


@app.command("sweep")
@config_options(SimConfig, SIM_OPTIONS)
def sweep_cmd(
    param: str = typer.Option("ckpt-interval", "--param",
                              help=f"Policy to sweep: {', '.join(SWEEPS)}."),
    values: str = typer.Option("5,10,15,20,30,45,60,90", "--values",
                               help="Comma-separated values to try."),
    out: Path = out_dir_option(f"{DEFAULT_DATA_DIR}/sweeps", "sweep-PARAM.csv and .png"),
    fleet: str | None = FleetOption, pool: str | None = PoolOpt, job_gpus: int | None = JobOpt,
    config: dict[str, Any] = CONFIG,
    storage: Path | None = StorageOpt, ckpt_size: str | None = CkptSizeOpt,
    region_loss_per_year: float = RegionLossOpt, region_outage: float = OutageOpt,
    local_cache: bool = CacheOpt, replication: bool = ReplOpt,
    record: bool = typer.Option(False, "--record", help="Store a simulate.sweep event (--db): "
                                "the report's sweep section shows the latest one."),
    db: str | None = DbOption, as_json: bool = JsonOption,
) -> None:
    """Sweep one policy; report the optimum found beside the Young/Daly interval."""
    try:
        vals = [float(v) for v in values.split(",") if v.strip()]
    except ValueError:
        raise UserError(f"--values must be numbers separated by commas; got {values!r}") from None
    check_out_dir(out)  # before the sweep: a bad --out must not cost the whole run
    shape = _fleet(fleet, db, pool)
    cfg = storage_config(_config(shape, job_gpus, config), shape, StorageOptions(
        storage, ckpt_size, local_cache, replication, region_loss_per_year, region_outage))
    store = Store(db) if record else None  # a bad --db fails before the sweep runs
    with _progress(as_json) as bar:
        task = bar.add_task(f"sweeping {param} over {len(vals)} values", total=len(vals))
        result = sweep(cfg, shape, param, vals,
                       progress=lambda n, f: bar.update(task, completed=n + f))
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / f"sweep-{param}.csv", out / f"sweep-{param}.png"
    write_csv(result, csv_path)
    write_png(result, png_path)
    if store is not None:
        store.append_event(shape.name, Kind.SIMULATE_SWEEP, sweep_payload(
            result, fleet=shape.name, job_gpus=cfg.job_gpus, days=cfg.days, trials=cfg.trials,
            seed=cfg.seed), actor="cli", reason="rackscale simulate sweep")
    if as_json:
        emit_json(result.as_dict() | {"csv": str(csv_path), "png": str(png_path)})
        return
    t = Table(title=f"ETTR vs {param} ({SIMULATED})")
    for col in (param, "ETTR", "± 95% CI", "goodput", "MTTF h"):
        t.add_column(col, justify="right")
    for pt in result.points:
        t.add_row(f"{pt.value:g}", f"{pt.ettr.mean:.4f}", f"{pt.ettr.ci95:.4f}",
                  f"{pt.goodput.total:.4f}", f"{pt.job_mttf_h:.2f}")
    console.print(t)
    best = result.optimum
    fitted = "" if best.fitted_min is None else f" (parabola fit {best.fitted_min:.1f})"
    console.print(f"optimum found: {param} = [bold]{best.value:g}[/]{fitted}, ETTR "
                  f"{best.ettr.mean:.4f}; Young/Daly interval: {result.young_min:.1f} / "
                  f"{result.daly_min:.1f} min")
    say(f"wrote {csv_path} and {png_path}")


def step_simulate(ctx: DemoContext) -> None:
    """Demo: a 30-day job on the seed fleet, sized to the certified capacity if there is one."""
    fleet = FleetShape.from_spec(ctx.topo.spec)
    domain = fleet.trays_per_domain * fleet.gpus_per_tray
    if ctx.results.certify is not None:
        # Size the job by the same rule the usable-capacity report applies (whole, fully
        # healthy, certified NVLink domains), so the demo's figures agree with each other.
        from rackscale.report import ledger_now

        _, ledger = ledger_now(ctx.store, fleet=ctx.topo.spec.name)
        certified = int(ledger.step("certified").count)
        job = certified // domain * domain
        how = (f"sized to the certified capacity: {certified} GPUs in whole, fully healthy "
               f"{domain}-GPU NVLink domains (the report's ledger, step 6)")
        if job == 0:
            console.print(f"no whole {domain}-GPU domain certified healthy: nothing to simulate")
            ctx.results.simulate = SimulateStepResult(job_gpus=0, how=how, result=None,
                                                      skipped="no certified domain")
            return
    else:
        job = fleet.gpus
        how = "no certification results: using the whole fleet"
    console.print(f"job: {job} GPUs, {how}")
    cfg = make_config(job_gpus=job, days=30, trials=200, seed=ctx.seed)
    result = run(cfg, fleet)
    print_result(result, causes=5)
    if result.units_spare == 0:
        console.print("no spare rack is left beside the job: every tray fault waits for its "
                      "repair (compare: `rackscale simulate sweep --job-gpus 432 "
                      "--param spare-domains --values 0,1`)")
    ctx.store.append_event(fleet.name, Kind.SIMULATE_RUN, result.payload(), actor="demo",
                           reason="rackscale demo")
    ctx.results.simulate = SimulateStepResult(job_gpus=job, how=how, result=result)


@app.command("storage-whatif")
def storage_whatif_cmd(
    storage: Path = WhatifStorageOpt, fleet: str | None = FleetOption,
    pool: str | None = PoolOpt, job_gpus: int | None = JobOpt,
    ckpt_size: str | None = CkptSizeOpt, days: float = WhatifDaysOpt,
    trials: int = WhatifTrialsOpt, seed: int = WhatifSeedOpt, failure_model: str = WhatifModelOpt,
    intervals: str = WhatifIntervalsOpt, ckpt_interval: float = WhatifRefOpt,
    restart: float = WhatifRestartOpt, region_loss_per_year: float = WhatifRegionLossOpt,
    region_outage: float = OutageOpt, gpu_hour_price: float = PriceOpt,
    record: bool = WhatifRecordOpt, db: str | None = DbOption, as_json: bool = JsonOption,
) -> None:
    """Same failures with/without local cache and cross-region replication, per interval."""
    run_whatif(WhatifRequest(
        storage=storage, fleet=fleet, pool=pool, job_gpus=job_gpus, ckpt_size=ckpt_size,
        days=days, trials=trials, seed=seed, failure_model=failure_model, intervals=intervals,
        ckpt_interval=ckpt_interval, restart=restart, region_loss_per_year=region_loss_per_year,
        region_outage=region_outage, gpu_hour_price=gpu_hour_price, record=record, db=db,
        as_json=as_json))
