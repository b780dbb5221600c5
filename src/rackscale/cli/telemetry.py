"""`rackscale telemetry ...`: GPU telemetry in from NVIDIA's dcgm-exporter; Slurm's health check.

`scrape` reads pages once, `watch` every few seconds; both record findings as certification's
are (the lifecycle's triage, drain and return act on them on `lifecycle run`'s next pass).
`health-check` is for Slurm's HealthCheckProgram (or Epilog) on a node: it reads the node's own
exporter, records what it finds and, when the node's tray leaves production, drains the node
through the lifecycle at once.
"""

from __future__ import annotations

import functools
import os
import socket
import time

import typer

from rackscale.cli._common import DbOption, JsonOption, console, emit_json, noun, plain
from rackscale.cli.lifecycle import fleet_topology
from rackscale.errors import UserError
from rackscale.lifecycle import (
    ScontrolSlurm,
    apply_findings,
    coolant_responses,
    drain_out_of_service,
    promote_passing,
    state_of,
)
from rackscale.state import FleetState
from rackscale.store import Store
from rackscale.telemetry import ScrapeReport, node_hosts, parse_page, read_source, scrape_sources
from rackscale.telemetry import scrape as record_scrape

app = noun("GPU telemetry in (NVIDIA dcgm-exporter) and Slurm's node health check.")

DcgmOption = typer.Option(..., "--dcgm", metavar="URL|FILE", help="dcgm-exporter's /metrics "
                          "URL (or a Prometheus /federate URL, or a saved page); repeatable.")
HostsOption = typer.Option(None, "--hosts", metavar="FILE", show_default=False,
                           help="YAML map of exporter Hostname -> tray id, where host names "
                           "are not the Slurm node names (tray id with '/' as '-').")


def _scrape_once(store: Store, sources: list[str], hosts_file: str | None,
                 state: FleetState | None = None) -> ScrapeReport:
    topo = state.topo if state is not None else fleet_topology(store)
    return scrape_sources(store, topo, sources, hosts_file,
                          functools.partial(coolant_responses, store), state)


def _show(rep: ScrapeReport) -> None:
    console.print(f"telemetry {rep.run_id}: {rep.gpus} GPUs read from "
                  f"{len(rep.sources)} source(s); {len(rep.findings)} new findings, "
                  f"{rep.repeated} already on record, {len(rep.skipped)} skipped, "
                  f"{rep.counters_recorded} trays' counters recorded")
    for f in rep.findings:
        ev = f["evidence"]
        console.print(plain(f"  {f['verdict']:<4} {f['component']} {f['kind']}: "
                            f"{ev['field']}={ev['value']:g}"))
    for n in rep.noted:
        console.print(plain(f"  noted {n['component']}: {n['why']}"))
    for s in rep.skipped:
        console.print(plain(f"  skipped {s['host'] or '-'} gpu {s['gpu']}: {s['why']}"))
    if rep.findings:
        console.print("  the lifecycle acts on failing findings on its next pass "
                      "(rackscale lifecycle run)")


@app.command()
def scrape(
    dcgm: list[str] = DcgmOption,
    hosts: str | None = HostsOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Read dcgm-exporter pages once and record what is new: hardware Xids, ECC double-bit
    errors and row-remap failure fail the GPU; rising NVLink CRC errors and throttling are
    noted (rack-wide throttling is the rack's CDU)."""
    rep = _scrape_once(Store(db), dcgm, hosts)
    if as_json:
        emit_json(rep.as_dict())
    else:
        _show(rep)


@app.command()
def watch(
    dcgm: list[str] = DcgmOption,
    every: float = typer.Option(30.0, "--every", metavar="S", min=1.0, max=86400.0,
                                help="Seconds between scrapes."),
    count: int | None = typer.Option(None, "--count", min=1, help="Stop after N scrapes "
                                     "(default: run until interrupted)."),
    hosts: str | None = HostsOption,
    db: str | None = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Scrape every --every seconds (one JSON object per scrape with --json)."""
    store = Store(db)
    state = FleetState(fleet_topology(store))  # kept: each scrape reads only what is new
    done = 0
    while count is None or done < count:
        started = time.monotonic()
        rep = _scrape_once(store, dcgm, hosts, state)
        if as_json:
            emit_json(rep.as_dict())
        else:
            _show(rep)
        done += 1
        if count is None or done < count:
            time.sleep(max(0.0, every - (time.monotonic() - started)))


@app.command("health-check")
def health_check(
    dcgm: str = typer.Option("http://localhost:9400/metrics", "--dcgm", metavar="URL|FILE",
                             help="This node's dcgm-exporter."),
    node: str | None = typer.Option(None, "--node", show_default=False, help="This node's "
                                    "Slurm name (default: $SLURMD_NODENAME, else the host "
                                    "name)."),
    db: str | None = DbOption,
    slurm_conf: str | None = typer.Option(None, "--slurm-conf", metavar="FILE",
                                          help="slurm.conf (default: Slurm's own)."),
    as_json: bool = JsonOption,
) -> None:
    """Slurm's HealthCheckProgram (or Epilog): check this node's GPUs on its exporter, record
    what is new, triage its tray on a failing finding and drain the node through the
    lifecycle (recorded; resumed by `lifecycle run` once the tray is re-certified)."""
    name = node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    store = Store(db)
    topo = fleet_topology(store)
    tray = node_hosts(topo).get(name)
    if tray is None:
        raise UserError(f"node {name!r} is no tray of fleet {topo.spec.name}; give --node "
                        "with its Slurm name (tray id with '/' as '-')")
    page = parse_page(read_source(dcgm), dcgm)
    # Only this node's GPUs: another host on the page is not this check's to judge.
    page.gpus = [g for g in page.gpus if g.host == name]
    rep = record_scrape(store, topo, [page], hosts={name: tray})
    tri = apply_findings(store, topo, actor="health-check")
    promote_passing(store, topo, actor="health-check", report=tri)
    drained = drain_out_of_service(store, ScontrolSlurm(conf=slurm_conf), [tray],
                                   actor="health-check")
    out = rep.as_dict() | {"node": name, "tray": tray, "state": state_of(store, tray).state,
                           "drained": drained}
    if as_json:
        emit_json(out)
        return
    _show(rep)
    console.print(plain(f"{name} ({tray}): {out['state']}"
                        + (f"; drained in Slurm ({drained[0]})" if drained else "")))
