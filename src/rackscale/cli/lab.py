"""`rackscale lab ...`: build, inspect, fault and remove the miniature cluster (root)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from rackscale import lab
from rackscale.cli._common import JsonOption, console, emit_json, noun, say
from rackscale.cli.fleet import LAB_FLEET, resolve_spec
from rackscale.faults import load_faults
from rackscale.fleet import Topology

app = noun("A real miniature multi-rack cluster on this host: namespaces, bridges, tc, "
           "cgroups (root).")

StateOption = typer.Option(str(lab.DEFAULT_STATE_DIR), "--lab", metavar="DIR",
                           help="The lab's state directory.")


def _print_status(s: dict[str, Any]) -> None:
    r = s["rates_mbit"]
    console.print(f"lab [bold]{s['lab_id']}[/] ({s['status']}): fleet {s['fleet']}, "
                  f"{s['ranks']} ranks; {s['namespaces']} namespaces, {s['links']} links, "
                  f"{s['cgroups']} cgroups, {s['processes']} processes recorded in {s['state']}")
    console.print(f"stated rates: scale-out {r['scale_out']:g} Mbit/s, NVLink "
                  f"{r['nvlink']:g} Mbit/s each way, leaf uplinks {r['uplink']:g} Mbit/s; "
                  f"{s['cpu_per_rank']:g} CPU cores per rank")
    if s["missing_namespaces"]:
        console.print(f"[yellow]missing namespaces:[/] {', '.join(s['missing_namespaces'])}")
    if s["faults"]:
        table = Table(title="faults applied")
        # `simulated`: what a coolant fault's figures rest on (the lab has no liquid loop)
        cols = ("target", "kind", "severity", "of", "duty", "period_s", "simulated")
        for col in cols:
            table.add_column(col)
        for f in s["faults"]:
            table.add_row(*(str(f.get(c)) if f.get(c) is not None else "" for c in cols))
        console.print(table)


@app.command()
def up(
    fleet: str | None = typer.Option(None, "--fleet", metavar="SPEC", help="Fleet spec file "
                                     "or built-in fleet name (default: lab, the shipped 2-rack "
                                     "lab fleet)."),
    state_dir: str = StateOption,
    as_json: bool = JsonOption,
) -> None:
    """Build the lab for a fleet of lab-mini racks."""
    path = fleet or lab.default_fleet_path()
    topo = Topology.build(resolve_spec(path, None))
    with console.status("building the lab", spinner="dots") as spin:
        lab.up(topo, Path(state_dir), fleet_file=path,
               on_step=None if as_json else lambda s: spin.update(f"building the lab: {s}"))
    s = lab.status(Path(state_dir)) or {}
    if as_json:
        emit_json(s | {"fleet_file": path})
        return
    _print_status(s)
    say(f"certify it: rackscale certify run --fleet {fleet or LAB_FLEET} --backend real "
        "--runner local"
        + (f" --lab {state_dir}" if state_dir != StateOption.default else ""))


@app.command()
def status(state_dir: str = StateOption, as_json: bool = JsonOption) -> None:
    """What the lab has built and which faults are applied."""
    s = lab.status(Path(state_dir))
    if as_json:
        emit_json(s or {"status": "none"})
        return
    if s is None:
        say(f"no lab recorded in {state_dir}")
        return
    _print_status(s)


@app.command()
def inject(
    faults: str = typer.Argument(..., metavar="FILE",
                                 help="Faults file (the format the twin reads)."),
    state_dir: str = StateOption,
    as_json: bool = JsonOption,
) -> None:
    """Apply faults for real (tc rate cuts, links down, CPU quotas, timers)."""
    st = lab.require_up(Path(state_dir), "lab inject")
    topo = Topology.build(resolve_spec(st.data["fleet_file"], None))
    ff = load_faults(faults, topo)
    present = lab.inject(Path(state_dir), list(ff.faults))
    if as_json:
        emit_json({"faults": present})
        return
    console.print(f"applied {len(ff.faults)} faults; {len(present)} present on the lab")


@app.command()
def clear(state_dir: str = StateOption, as_json: bool = JsonOption) -> None:
    """Lift every fault: links back up at nominal rates, CPU shares and timers restored."""
    n = lab.clear(Path(state_dir))
    if as_json:
        emit_json({"cleared": n})
        return
    console.print(f"cleared {n} faults")


@app.command()
def down(state_dir: str = StateOption, as_json: bool = JsonOption) -> None:
    """Remove everything the lab recorded (idempotent; also after a crash of `lab up`)."""
    removed = lab.down(Path(state_dir))
    if as_json:
        emit_json({"removed": removed})
        return
    console.print(f"removed {len(removed)} recorded resources" if removed
                  else f"no lab recorded in {state_dir}: nothing to remove")
