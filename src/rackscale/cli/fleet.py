"""`rackscale fleet ...`: validate, show, load a fleet spec; paths and blast radius."""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.cli._common import DbOption, JsonOption, console, emit_json, noun
from rackscale.errors import UserError
from rackscale.fleet import FleetSpec, Topology, load_fleet, seed_fleet
from rackscale.store import Store, load_topology

app = noun("The fleet model: specs, inventory, topology queries.")

SeedOption = typer.Option(None, "--seed", help="Use a built-in fleet instead of a file "
                          "(seed-504: 7 vr-nvl72 racks in two regions).")


def resolve_spec(file: str | None, seed: str | None, *,
                 default_seed: str | None = None) -> FleetSpec:
    """The spec named by a FILE argument or --seed NAME (exactly one of them); with neither,
    the built-in `default_seed` when the command has one."""
    if file and seed:
        raise UserError("give a fleet FILE or --seed NAME, not both")
    seed = seed or (None if file else default_seed)
    if seed:
        return seed_fleet(seed)
    if file:
        return load_fleet(file)
    raise UserError("give a fleet FILE or --seed NAME (e.g. --seed seed-504)")


@app.command()
def validate(file: str = typer.Argument(..., help="Fleet spec YAML.")) -> None:
    """Check a fleet spec; exit 2 with file, line, field and fix when it is invalid."""
    spec = load_fleet(file)
    topo = Topology.build(spec)
    console.print(f"[green]ok[/] {file}: fleet {spec.name}, {len(topo.regions)} regions, "
                  f"{len(topo.racks)} racks, {len(topo.gpu_ids)} GPUs")


@app.command()
def show(
    file: str | None = typer.Argument(None, help="Fleet spec YAML."),
    seed: str | None = SeedOption,
    as_json: bool = JsonOption,
) -> None:
    """Counts per region, rack template and kind; headline GPU count; peak PFLOPS."""
    topo = Topology.build(resolve_spec(file, seed))
    summary = topo.summary()
    if as_json:
        emit_json(summary)
        return
    print_summary(summary)


def print_summary(summary: dict) -> None:
    kinds = [k for k in summary["totals"] if k not in ("region",)]
    table = Table(title=f"fleet {summary['fleet']}", show_lines=False)
    table.add_column("kind")
    for region in summary["per_region"]:
        table.add_column(region, justify="right")
    table.add_column("total", justify="right", style="bold")
    for k in kinds:
        table.add_row(k, *(str(c.get(k, 0)) for c in summary["per_region"].values()),
                      str(summary["totals"][k]))
    console.print(table)
    templates = ", ".join(f"{n} x {t}" for t, n in summary["per_rack_template"].items())
    est = summary["peak_is_estimate_for"]
    note = f" (estimate: no datasheet BF16 figure for {', '.join(est)})" if est else ""
    console.print(f"racks: {summary['racks']} ({templates}) in {summary['regions']} regions")
    console.print(f"headline GPUs: [bold]{summary['headline_gpus']}[/]; peak dense BF16: "
                  f"[bold]{summary['peak_bf16_pflops']} PFLOPS[/]{note}")


@app.command()
def load(
    file: str | None = typer.Argument(None, help="Fleet spec YAML."),
    seed: str | None = SeedOption,
    db: str | None = DbOption,
    replace: bool = typer.Option(False, "--replace", help="Replace another fleet the store "
                                 "already holds (its components are deleted, its events kept)."),
    as_json: bool = JsonOption,
) -> None:
    """Load a fleet into the inventory. Idempotent; a changed spec prints what changed. A store
    that holds another fleet is refused unless --replace."""
    spec = resolve_spec(file, seed)  # validation first: nothing is written on a bad spec
    topo = Topology.build(spec)
    store = Store(db)
    with Progress(TextColumn("loading inventory"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("load", total=None)
        result = load_topology(store, topo, reason=f"fleet load {file or seed}", replace=replace,
                               progress=lambda d, t: bar.update(task, completed=d, total=t))
    if as_json:
        emit_json(result.as_dict() | {"db": store.safe_url})
        return
    if not result.changed:
        console.print(f"fleet {spec.name}: no change ({result.total_components} components "
                      f"already in {store.safe_url})")
        return
    console.print(f"fleet {spec.name} -> {store.safe_url}: +{result.components_added} "
                  f"-{result.components_removed} ~{result.components_changed} components")
    for r in result.racks_added:
        console.print(f"  [green]+ rack {r}[/]")
    for r in result.racks_removed:
        console.print(f"  [red]- rack {r}[/]")


@app.command()
def path(
    a: str = typer.Argument(..., help="GPU id, e.g. us-east/r01/c01/gpu0"),
    b: str = typer.Argument(..., help="GPU id"),
    file: str | None = typer.Option(None, "--fleet", help="Fleet spec YAML (default: seed)."),
    seed: str | None = SeedOption,
    as_json: bool = JsonOption,
) -> None:
    """The route between two GPUs: NVLink inside a domain, else nic-leaf-spine-leaf-nic."""
    topo = Topology.build(resolve_spec(file, seed, default_seed="seed-504"))
    p = topo.path(a, b)
    if as_json:
        emit_json({"a": p.a, "b": p.b, "fabric": p.fabric, "hops": [list(h) for h in p.hops]})
        return
    console.print(f"[bold]{p.fabric}[/]: {escape(str(p))}")


@app.command()
def affects(
    component: str = typer.Argument(..., help="Component id (switch, NIC, leaf, CDU, ...)."),
    file: str | None = typer.Option(None, "--fleet", help="Fleet spec YAML (default: seed)."),
    seed: str | None = SeedOption,
    as_json: bool = JsonOption,
) -> None:
    """The GPUs a fault of COMPONENT touches (its blast radius)."""
    topo = Topology.build(resolve_spec(file, seed, default_seed="seed-504"))
    gpus = topo.affected_gpu_ids(component)
    if as_json:
        emit_json({"component": component, "gpus": gpus, "count": len(gpus)})
        return
    console.print(f"{component} ({topo.component(component).kind}) affects {len(gpus)} GPUs")
    for g in gpus[:12]:
        console.print(f"  {g}")
    if len(gpus) > 12:
        console.print(f"  ... and {len(gpus) - 12} more (use --json for all)")
