"""`rackscale fleet ...`: validate, show, load a fleet spec; paths and blast radius; the
fleet's shape as Slurm's topology.conf."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rackscale.cli._common import DbOption, FleetOption, JsonOption, console, emit_json, noun
from rackscale.errors import UserError
from rackscale.fleet import (
    SEEDS,
    TOPOLOGY_PLUGINS,
    FleetSpec,
    Topology,
    load_fleet,
    render_topology_conf,
    seed_fleet,
)
from rackscale.redact import redact_url
from rackscale.store import Store, default_db_url, load_topology, loaded_spec

app = noun("The fleet model: specs, inventory, topology queries.")


class NoFleet(UserError):
    pass


# The built-in name of the lab's fleet (2 lab-mini racks, 8 ranks) that ships with rackscale.
LAB_FLEET = "lab"


def spec_of(value: str) -> FleetSpec:
    """The fleet a `--fleet` value names: a spec file, else a built-in fleet (a directory of
    that name does not hide it)."""
    path = Path(value)
    if value == LAB_FLEET and not path.is_file():
        from rackscale.lab import default_fleet_path  # the lab's package only when named

        return load_fleet(default_fleet_path())
    if value in SEEDS and not path.is_file():
        return seed_fleet(value)
    if path.exists() or path.suffix in (".yaml", ".yml", ".json") or "/" in value:
        return load_fleet(value)  # a path: its errors name the file
    raise NoFleet(f"--fleet {value!r}: no such file, and no built-in fleet of that name; "
                  f"built-in fleets: {', '.join([*sorted(SEEDS), LAB_FLEET])}")


def existing_store(db: str | None) -> Store | None:
    """The store at `db` opened read-only, or None when it is a SQLite file that does not
    exist yet: asking which fleet is loaded must not create or change a database."""
    url = db or default_db_url()
    if url.startswith("sqlite:///") and ":memory:" not in url and \
            not Path(url.removeprefix("sqlite:///")).exists():
        return None
    return Store(url, readonly=True)


def resolve_spec(fleet: str | None, db: str | None) -> FleetSpec:
    """The fleet a command works on: `--fleet` (file or built-in name), else the fleet loaded
    in the store."""
    if fleet is not None:
        return spec_of(fleet)
    store = existing_store(db)
    spec = loaded_spec(store) if store is not None else None
    if spec is None:
        where = store.safe_url if store is not None else redact_url(db or default_db_url())
        raise NoFleet(f"no --fleet given and no fleet loaded in {where}; give --fleet FILE "
                      "or --fleet seed-504, or load one: rackscale fleet load --fleet FILE")
    return spec


@app.command()
def validate(
    fleet: str = typer.Option(..., "--fleet", metavar="SPEC", help="Fleet spec YAML file "
                              "(or a built-in fleet name) to check."),
) -> None:
    """Check a fleet spec; exit 2 with file, line, field and fix when it is invalid."""
    spec = spec_of(fleet)
    topo = Topology.build(spec)
    console.print(f"[green]ok[/] {escape(fleet)}: fleet {spec.name}, {len(topo.regions)} regions, "
                  f"{len(topo.racks)} racks, {len(topo.gpu_ids)} GPUs")


@app.command()
def show(
    fleet: str | None = FleetOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Counts per region, rack template and kind; headline GPU count; peak PFLOPS (of the
    loaded fleet unless --fleet names one)."""
    topo = Topology.build(resolve_spec(fleet, db))
    summary = topo.summary()
    if as_json:
        emit_json(summary)
        return
    print_summary(summary)


def print_summary(summary: dict[str, Any]) -> None:
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
    fleet: str = typer.Option(..., "--fleet", metavar="SPEC", help="Fleet spec YAML file, or "
                              "the name of a built-in fleet (seed-504)."),
    db: str | None = DbOption,
    replace: bool = typer.Option(False, "--replace", help="Replace another fleet the store "
                                 "already holds (its components are deleted, its events kept)."),
    as_json: bool = JsonOption,
) -> None:
    """Load a fleet into the inventory. Idempotent; a changed spec prints what changed. A store
    that holds another fleet is refused unless --replace."""
    spec = spec_of(fleet)  # validation first: nothing is written on a bad spec
    topo = Topology.build(spec)
    store = Store(db)
    with Progress(TextColumn("loading inventory"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=as_json) as bar:
        task = bar.add_task("load", total=None)
        result = load_topology(store, topo, reason=f"fleet load {fleet}", replace=replace,
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
    a: str = typer.Argument(..., metavar="GPU", help="GPU id, e.g. us-east/r01/c01/gpu0"),
    b: str = typer.Argument(..., metavar="GPU", help="GPU id"),
    fleet: str | None = FleetOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """The route between two GPUs: NVLink inside a domain, else nic-leaf-spine-leaf-nic."""
    topo = Topology.build(resolve_spec(fleet, db))
    p = topo.path(a, b)
    if as_json:
        emit_json({"a": p.a, "b": p.b, "fabric": p.fabric, "hops": [list(h) for h in p.hops]})
        return
    console.print(f"[bold]{p.fabric}[/]: {escape(str(p))}")


@app.command()
def affects(
    component: str = typer.Argument(..., metavar="ID",
                                    help="Component id (switch, NIC, leaf, CDU, ...)."),
    fleet: str | None = FleetOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """The GPUs a fault of COMPONENT touches (its blast radius)."""
    topo = Topology.build(resolve_spec(fleet, db))
    gpus = topo.affected_gpu_ids(component)
    if as_json:
        emit_json({"component": component, "gpus": gpus, "count": len(gpus)})
        return
    console.print(f"{component} ({topo.component(component).kind}) affects {len(gpus)} GPUs")
    for g in gpus[:12]:
        console.print(f"  {g}")
    if len(gpus) > 12:
        console.print(f"  ... and {len(gpus) - 12} more (use --json for all)")


@app.command("topology-conf")
def topology_conf(
    plugin: str = typer.Option("tree", "--plugin", metavar="|".join(TOPOLOGY_PLUGINS),
                               help="Slurm topology plugin the file is for: tree (Slurm "
                               "22.05 and later) or block (Slurm 23.11 and later)."),
    fleet: str | None = FleetOption,
    db: str | None = DbOption,
) -> None:
    """Print Slurm's topology.conf for the fleet: one leaf switch (tree) or block (block) per
    NVLink domain with its trays' node names, the scale-out leaves and spines above (tree).
    Put it beside slurm.conf with TopologyPlugin=topology/PLUGIN."""
    topo = Topology.build(resolve_spec(fleet, db))
    # Plain stdout, not the Rich console: the text is a file, no markup or wrapping in it.
    typer.echo(render_topology_conf(topo, plugin), nl=False)
