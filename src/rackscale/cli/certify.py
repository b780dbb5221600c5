"""`rackscale certify ...`: run the ladder, run one probe here, list findings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.certify import (
    DEMO_FAULTS,
    PROBES,
    SHARED_CPU_THRESHOLDS,
    CertifyRun,
    FindingsFilter,
    Groups,
    Ladder,
    LadderConfig,
    LadderProgress,
    RunnerBackend,
    Scope,
    TwinBackend,
    TwinRunRequest,
    parse_stages,
    record_run,
    run_on_twin,
    twin_faults,
    write_jsonl,
)
from rackscale.cli._common import (
    DbOption,
    FleetOption,
    JsonOption,
    check_out_dir,
    check_out_file,
    console,
    emit_json,
    noun,
    out_dir_option,
    plain,
    say,
    seed_option,
)
from rackscale.cli._pipeline import DemoContext
from rackscale.cli.fleet import resolve_spec
from rackscale.errors import UserError
from rackscale.faults import TwinHardware
from rackscale.fleet import Topology
from rackscale.provenance import Provenance
from rackscale.store import DEFAULT_DATA_DIR, CertifyFindingV1, CertifyRunV1, Kind, Store

app = noun("Certify hardware: the staged ladder, single probes, findings.")
FINDINGS_FILE = "findings.jsonl"

# `certify probe` runs every rank as a process on this machine and holds the message in each:
# past these it exhausts the machine instead of measuring it.
MAX_PROBE_WORLD = 64
MAX_PROBE_BYTES = 1 << 31


def _stages(text: str) -> tuple[int, ...]:
    # rackscale.certify's names are lazy (module __getattr__), so typed Any here
    stages: tuple[int, ...] = parse_stages([text], "--stages")
    return stages


def run_twin(topo: Topology, req: TwinRunRequest, *, show_progress: bool) -> CertifyRun:
    """The certify room's run on the twin, with the terminal's progress bars."""
    with _progress_bar(show_progress) as progress:
        return run_on_twin(topo, req, progress)


@contextmanager
def _progress_bar(show_progress: bool) -> Iterator[LadderProgress]:
    names = {1: "stage 1: per GPU", 2: "stage 2: per tray", 3: "stage 3: per NVLink domain",
             4: "stage 4: multi-rack, NVLink off then on"}
    with Progress(SpinnerColumn(), BarColumn(bar_width=12), TextColumn("{task.description}"),
                  TimeElapsedColumn(),
                  console=console, disable=not show_progress) as bar:
        tasks: dict[int, Any] = {}

        def progress(stage: int, msg: str) -> None:
            for s, t in tasks.items():
                if s != stage:
                    bar.update(t, total=1, completed=1)
            if stage not in tasks:
                tasks[stage] = bar.add_task(names[stage], total=None)
            bar.update(tasks[stage], description=f"{names[stage]}: {escape(msg)}")

        yield progress
        for t in tasks.values():
            bar.update(t, total=1, completed=1)


def _evidence_text(ev: dict[str, Any]) -> str:
    if "error" in ev:
        return str(ev["error"])[:60]
    if "repeats_wrong" in ev:
        return f"wrong GEMM result in {ev['repeats_wrong']}/{ev['repeats']} repeats"
    if "of" in ev:
        sev = ev.get("estimated_severity")
        at = f" at {sev:.0%} of nominal" if isinstance(sev, float) and sev > 0 else ""
        return f"{ev['of']}{at}, present in {ev['present_in_repeats']:.0%} of repeats"
    if "flow_lpm" in ev:
        return (f"coolant {ev['flow_lpm']} of {ev['required_lpm']} L/min; GPU clocks "
                f"{ev['gpu_clock_frac_median']:.0%}; {ev['gpus_throttled']} GPUs throttled")
    parts = []
    if ev.get("value") is not None:
        parts.append(f"{ev['value']:.4g} {ev.get('unit', '')}")
    if "rel" in ev:
        parts.append(f"{ev['rel']:.0%} of ref")
    if "nvlink_on_rel" in ev:
        parts.append(f"NVLink on: {ev['nvlink_on_rel']:.0%}")
    return ", ".join(parts)


def _columns(table: Table) -> None:
    table.add_column("component", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("stage", justify="right")
    table.add_column("evidence")
    table.add_column("conf", justify="right")


def _source(backend: str | None) -> str:
    """How a run's figures were obtained, in the words every certify table uses."""
    return (Provenance.parse(backend) or Provenance.REAL).described


def print_findings(run: CertifyRun) -> None:
    table = Table(title=f"findings ({_source(run.backend)}), run {run.run_id}")
    _columns(table)
    for f in run.findings:
        kind = f"flapping ({f.evidence['of']})" if f.kind == "flapping" else f.kind
        table.add_row(f.component, kind, str(f.stage), escape(_evidence_text(f.evidence)),
                      f"{f.confidence:.2f}")
    console.print(table)
    s = run.summary()
    # on real ranks the campaign took its wall time; the twin's campaign clock is a model
    campaign = (f"campaign time (simulated): {s['campaign_s'] / 3600:.1f} h; "
                if Provenance(run.backend) is Provenance.TWIN else "")
    console.print(
        f"GPUs clear of findings: [bold]{s['gpus_clear']}[/]/{s['gpus_total']} (outside "
        "every finding's blast radius); collective tests: "
        f"{s['collective_tests']} ({s['collective_runs']} runs with repeats) vs "
        f"{s['allpairs_tests']:,} all-pairs ({s['tests_vs_allpairs']:,.0f}x fewer); "
        f"{campaign}wall {s['wall_s']:.2f} s")
    print_untested(run.untested)


def print_untested(untested: list[dict[str, Any]], shown: int = 10) -> None:
    """The parts an earlier failure left out of the stage that tests them: not certified."""
    if not untested:
        return
    console.print(f"[yellow]untested[/]: {len(untested)} part(s) never measured, left out of "
                  "the stage that tests them by an earlier failure (not certified):")
    for u in untested[:shown]:
        console.print(f"  {escape(u['part'])} (stage {u['stage']}: left out because of "
                      f"{escape(', '.join(u['because']) or 'an earlier failure')})",
                      soft_wrap=True)
    if len(untested) > shown:
        console.print(f"  ... and {len(untested) - shown} more (--json lists all)")


def _save(store: Store, run: CertifyRun, jsonl: Path) -> None:
    record_run(store, run)
    write_jsonl(run.findings, jsonl, run_id=run.run_id, backend=run.backend)


@app.command()
def run(
    fleet: str | None = FleetOption,
    faults: str | None = typer.Option(None, "--faults", metavar="FILE", help="Faults file the "
                                      "twin applies ('demo' = the shipped demo faults)."),
    stages: str = typer.Option("1,2,3,4", "--stages", help="Stages to run, by number or "
                               "name: 1,2,3,4 or gpu,tray,domain,multi-rack."),
    twin_seed: int = seed_option(7, "the digital twin"),
    repeats: int = typer.Option(8, "--repeats", help="Samples per test over the soak window."),
    backend_name: str = typer.Option("twin", "--backend", help="twin (digital twin) or real "
                                     "(ranks on hardware, through --runner)."),
    runner_name: str = typer.Option("local", "--runner", help="With --backend real: local "
                                    "(processes here, in the lab's namespaces when a lab of "
                                    "this fleet is up) or slurm."),
    lab_dir: str | None = typer.Option(None, "--lab", metavar="DIR", show_default=False,
                                       help="The lab's state directory (a lab built by `lab "
                                       "up`; it must be up). Default: the lab in "
                                       "rackscale-data/lab when one is up, else the loopback."),
    size: int | None = typer.Option(None, "--size", help="All-reduce message size, bytes "
                                    "(default: 1 GiB on the twin, 4 MiB on real ranks)."),
    concurrency: int = typer.Option(3, "--concurrency", help="Groups tested at once (real)."),
    partition: str | None = typer.Option(None, "--partition", help="Slurm partition."),
    scope: str | None = typer.Option(None, "--scope", help="Certify only this region, rack "
                                     "or tray (e.g. after a repair)."),
    out: str = out_dir_option(DEFAULT_DATA_DIR, f"{FINDINGS_FILE} (appended)"),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Certify a fleet on the digital twin or on real ranks; exit 1 when anything fails."""
    spec = resolve_spec(fleet, db)
    check_out_file(check_out_dir(out) / FINDINGS_FILE)  # every check runs before the ladder
    topo = Topology.build(spec)
    store = Store(db)  # opened before the run: a bad --db fails fast
    backend = Provenance.parse(backend_name)
    if backend is Provenance.TWIN:
        if lab_dir is not None:  # the twin never reads a lab: the user meant --backend real
            raise UserError(f"--lab {lab_dir} applies to --backend real (the twin models "
                            "its faults from --faults)")
        config = LadderConfig(stages=_stages(stages), repeats=repeats, scope=scope,
                              message_bytes=size or 1 << 30)
        result = run_twin(topo, TwinRunRequest(config=config, seed=twin_seed, faults=faults),
                          show_progress=not as_json)
    elif backend is Provenance.REAL:
        if faults:
            raise UserError("--faults applies to the twin; on real ranks faults are real: "
                            "inject them into the lab with `rackscale lab inject FILE`")
        config = LadderConfig(stages=_stages(stages), repeats=repeats, scope=scope,
                              message_bytes=size or 4 << 20,
                              thresholds=dict(SHARED_CPU_THRESHOLDS))
        from rackscale.cli.certify_real import real_runner
        runner = real_runner(topo, runner_name, None if lab_dir is None else Path(lab_dir),
                             concurrency=concurrency,
                             partition=partition)
        try:
            result = _run_real(topo, runner, config, show_progress=not as_json)
        finally:
            runner.close()
    else:
        raise UserError(f"unknown backend {backend_name!r}; valid backends: twin, real")
    _save(store, result, Path(out) / FINDINGS_FILE)
    if as_json:
        emit_json(result.summary() | {"findings": [f.as_dict() for f in result.findings]})
    else:
        print_findings(result)
    if result.findings:
        raise typer.Exit(1)


def _run_real(topo: Topology, runner: Any, config: LadderConfig, *, show_progress: bool,
              ) -> CertifyRun:
    backend = RunnerBackend(topo, runner)
    if show_progress:
        console.print(f"ranks: {backend.describe()}; every figure measured")
    with _progress_bar(show_progress) as progress:
        return Ladder(topo, backend, config).run(progress)


def _achievable(probe: str, backend: Any, n: int, nbytes: int) -> tuple[float, str]:
    """This machine's achievable peak for a probe, and where the figure comes from."""
    if backend.cuda:
        import torch
        name = torch.cuda.get_device_name(0)
        if probe == "gemm":
            # H100/H200 share 989 TFLOPS dense BF16; a bf16 GEMM reaches about 790 on an H200
            return (790.0, "~790 TFLOPS: bf16 GEMM measured on an H200 (datasheet 989)") \
                if ("H200" in name or "H100" in name) else (float("nan"), "unknown SKU")
        if probe == "hbm":
            tbps = 4.8 if "H200" in name else 3.35 if "H100" in name else float("nan")
            return tbps, f"datasheet {tbps} TB/s (NVIDIA H100/H200 datasheets)"
        return float("nan"), "no link peak recorded"
    if probe == "gemm":
        import torch
        a = np.random.default_rng(0).random((n, n), dtype=np.float32)
        b = np.random.default_rng(1).random((n, n), dtype=np.float32)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        a @ b
        ta @ tb
        best = min(min(_timed(lambda: a @ b), _timed(lambda: ta @ tb)) for _ in range(4))
        return 2.0 * n**3 / best / 1e12, ("the faster of numpy/OpenBLAS and torch matmul, "
                                          "measured now, same size")
    if probe == "hbm":
        src = np.ones(nbytes // 4, dtype=np.float32)
        dst = np.empty_like(src)
        best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(5))
        return 2.0 * nbytes / best / 1e12, "numpy copy, measured now, same size"
    return float("nan"), "loopback gloo: no link peak"


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


@app.command()
def probe(
    name: str = typer.Argument(..., metavar="PROBE", help="gemm | hbm | allreduce"),
    backend_name: str = typer.Option("real", "--backend", help="real (this machine, "
                                     "PyTorch) or twin (seed fleet's first GPUs)."),
    size: int = typer.Option(16 << 20, "--size", min=1024, max=MAX_PROBE_BYTES,
                             help="All-reduce message size, bytes."),
    world: int = typer.Option(2, "--world", min=1, max=MAX_PROBE_WORLD,
                              help="All-reduce ranks (each one a local process)."),
    as_json: bool = JsonOption,
) -> None:
    """Run one probe here and print the figure against this machine's achievable peak."""
    if name not in ("gemm", "hbm", "allreduce"):
        raise UserError(f"unknown probe {name!r}; valid probes: gemm, hbm, allreduce")
    if name == "allreduce" and world < 2:
        raise UserError("--world must be >= 2: a collective needs two ranks")
    if backend_name == Provenance.REAL:
        from rackscale.certify import TorchBackend
        backend: Any = TorchBackend()
        where = backend.describe()
    elif backend_name == Provenance.TWIN:
        from rackscale.fleet import seed_fleet
        backend = TwinBackend(TwinHardware(Topology.build(seed_fleet()), seed=7))
        where = "seed-504 digital twin"
    else:
        raise UserError(f"unknown backend {backend_name!r}; valid backends: real, twin")
    probe_name = name
    if name == "allreduce":
        probe_name = "nvlink_allreduce" if backend_name == Provenance.REAL and backend.cuda \
            else "scaleout_allreduce"
    p = PROBES.create(probe_name, backend)
    if not p.detect():
        raise UserError(f"probe {probe_name} cannot run here: {backend.why_not(probe_name)}")
    scope = Scope(gpus=np.asarray([0]), size_bytes=size,
                  groups=Groups.of([list(range(world))]) if name == "allreduce" else None)
    m = p.run(scope)
    value = float(m.values[0])
    peak, peak_src = _achievable(name, backend, backend.gemm_n, backend.copy_bytes) \
        if backend_name == Provenance.REAL else (float("nan"), Provenance.TWIN.value)
    out = {"probe": probe_name, "backend": m.backend, "source": m.source, "where": where,
           "value": value, "unit": m.unit, "achievable_peak": peak, "peak_source": peak_src,
           "fraction_of_peak": value / peak if peak == peak else None,
           "extra": {k: np.asarray(v).tolist() for k, v in m.extra.items()}}
    if as_json:
        emit_json(out)
        return
    frac = f" = {value / peak:.0%} of achievable {peak:.4g} ({peak_src})" if peak == peak \
        else f" ({peak_src})"
    console.print(f"{probe_name} on {where}: [bold]{value:.4g} {m.unit}[/] ({m.source}){frac}")
    if "checksum_ok" in m.extra:
        console.print(f"GEMM result verified: {bool(m.extra['checksum_ok'][0])}")


@app.command()
def plan(
    fleet: str | None = FleetOption,
    stages: str = typer.Option("1,2,3,4", "--stages", help="Stages to plan, by number or "
                               "name: 1,2,3,4 or gpu,tray,domain,multi-rack."),
    scope: str | None = typer.Option(None, "--scope", help="Plan only this region, rack or "
                                     "tray."),
    size: int = typer.Option(1 << 30, "--size", help="All-reduce message size, bytes."),
    k8s: bool = typer.Option(False, "--k8s", help="Render Kubernetes Indexed Jobs (YAML); "
                             "rendered only, never applied."),
    out: str | None = typer.Option(None, "--out", metavar="DIR", help="With --k8s: write one "
                                   "file per batch into DIR instead of stdout."),
    image: str = typer.Option("rackscale:latest", "--image", help="Container image holding "
                              "rackscale and PyTorch with CUDA."),
    namespace: str = typer.Option("rackscale-certify", "--namespace", help="Namespace."),
    node_label: str = typer.Option("kubernetes.io/hostname", "--node-label", help="Node "
                                   "label whose value is the tray's node name."),
    repeats: int = typer.Option(8, "--repeats", help="Runs of each test, inside its Job."),
    version: str = typer.Option("1.31", "--k8s-version", help="Kubernetes version whose "
                                "schemas the manifests are checked against."),
    check: bool = typer.Option(True, "--validate/--no-validate", help="Check the manifests "
                               "against the Kubernetes schemas (kubernetes-validate)."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """The campaign `certify run` would run on a healthy fleet: its batches of tests per
    stage, or (--k8s) the same campaign as Kubernetes Indexed Jobs. Nothing is executed."""
    from rackscale.certify import K8sOptions
    from rackscale.cli.certify_plan import run_plan
    if out is not None and not k8s:
        raise UserError("--out writes Kubernetes manifests: give --k8s with it")
    spec = resolve_spec(fleet, db)
    topo = Topology.build(spec)
    config = LadderConfig(stages=_stages(stages), scope=scope, message_bytes=size)
    opts = K8sOptions(namespace=namespace, image=image, node_label=node_label, repeats=repeats)
    run_plan(topo, config, k8s=k8s, opts=opts, out=out, version=version, check=check,
             as_json=as_json)


@app.command()
def findings(
    run_id: str | None = typer.Option(None, "--run", help="Run id (default: the latest)."),
    kind: str | None = typer.Option(None, "--kind", help="Only findings of this kind."),
    rack: str | None = typer.Option(None, "--rack",
                                    help="Only findings on this rack (or part) and under it."),
    stage: str | None = typer.Option(None, "--stage", help="Only findings of this stage "
                                     "(its number or name)."),
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Findings of a certification run, from the store (filtered and ordered as the API's
    /api/v1/findings)."""
    store = Store(db, readonly=True)
    runs = [(e, e.read(CertifyRunV1))
            for e in store.events(kind=Kind.CERTIFY_RUN, newest_first=True)]
    if not runs:
        raise UserError(f"no certification run in {store.safe_url}; run `rackscale certify "
                        "run --faults demo` first")
    chosen = next(((e, r) for e, r in runs if r.run_id == run_id), None) if run_id \
        else runs[0]
    if chosen is None:
        raise UserError(f"no run {run_id!r}; runs: "
                        f"{', '.join(r.run_id for _, r in runs[:10])}")
    ev, run = chosen
    want = FindingsFilter(kind=kind, rack=rack, stage=stage)
    read = [(e.seq, e.read(CertifyFindingV1))
            for e in store.events_with(Kind.CERTIFY_FINDING, "run_id", run.run_id)]
    shown = [(seq, f) for seq, f in read if want.matches(f.component, f.kind, f.stage)]
    found = [f for _, f in sorted(shown, key=lambda sf: want.order(sf[1].component, sf[0]))]
    if as_json:
        emit_json({"run": ev.payload,  # the run as stored
                    "findings": [f.dump() for f in found]})
        return
    table = Table(title=f"findings of run {run.run_id} ({_source(run.backend)}, "
                  f"{ev.time:%Y-%m-%d %H:%M} UTC)")
    _columns(table)
    for f in found:
        kind = f"flapping ({f.evidence.get('of')})" if f.kind == "flapping" else f.kind
        table.add_row(plain(f.component), plain(kind), str(f.stage),
                      escape(_evidence_text(f.evidence)), f"{f.confidence:.2f}")
    console.print(table)
    clear = run.gpus_clear if run.gpus_clear is not None else run.gpus_healthy
    console.print(f"{len(found)} findings; GPUs clear of findings {clear}/{run.gpus_total}")


def step_certify(ctx: DemoContext) -> None:
    """Demo step: the ladder on the seed fleet's twin with the shipped faults file."""
    path, ff = twin_faults(ctx.topo, DEMO_FAULTS)
    say(f"faults file: {path} ({len(ff.faults) if ff else 0} faults injected into the twin)")
    result = run_twin(ctx.topo, TwinRunRequest(seed=ctx.seed, faults=DEMO_FAULTS),
                      show_progress=True)
    _save(ctx.store, result, ctx.data_dir / FINDINGS_FILE)
    print_findings(result)
    ctx.results.certify = result
