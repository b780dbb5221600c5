"""`rackscale checkpoint ls|show|verify|restore|gc|bench`: the tiered checkpoint store.

Without --config every tier is a directory under ./rackscale-data/checkpoints (the embedded
default); with --config a YAML/JSON tiers file (S3 endpoints, keys named by env variables).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from rackscale.checkpoint import (
    Restorer,
    StoreAuthError,
    StoreUnreachable,
    Tiers,
    TiersConfig,
    default_config,
    demo_checkpoint,
    gc,
    load_config,
    run_benchmarks,
)
from rackscale.cli._common import JsonOption, console, emit_json, noun
from rackscale.store import DEFAULT_DATA_DIR

if TYPE_CHECKING:
    from rackscale.cli.demo import DemoContext

app = noun("Tiered checkpoints: local NVMe, region S3, other regions, archive.")
ConfigOption = typer.Option(None, "--config", help="Tiers config (YAML/JSON); default: "
                            "directories under ./rackscale-data/checkpoints.")


def _cfg(config: Path | None) -> TiersConfig:
    return load_config(config) if config else default_config(DEFAULT_DATA_DIR)


def _fmt_t(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def _presence(tiers: Tiers, ckpt_id: str) -> dict[str, str]:
    out = {}
    for s in tiers.all:
        try:
            out[s.name] = "yes" if s.head(tiers.layout.manifest(ckpt_id)) else "no"
        except (StoreUnreachable, StoreAuthError):
            out[s.name] = "unreachable"
    return out


def _rows(tiers: Tiers) -> list[dict]:
    r = Restorer(tiers)
    rows = []
    for ckpt_id in r.list_ids():
        cat = tiers.read_catalog(ckpt_id) or {}
        m, src, _ = r.manifest(ckpt_id)
        states = cat.get("states") or m.states
        rpo = states["region"] - states["staged"] if {"region", "staged"} <= set(states) else None
        rows.append({"id": ckpt_id, "step": m.step, "bytes": m.total_bytes, "hash": m.hash,
                     "algo": m.algo, "state": list(states)[-1] if states else "-",
                     "states": states, "rpo_s": rpo, "tiers": _presence(tiers, ckpt_id),
                     "errors": cat.get("errors", {}), "manifest_from": src})
    return rows


@app.command("ls")
def ls(config: Path | None = ConfigOption, json_out: bool = JsonOption) -> None:
    """List committed checkpoints, their state, RPO and which tiers hold them."""
    tiers = Tiers(_cfg(config))
    rows = _rows(tiers)
    if json_out:
        emit_json(rows)
        return
    t = Table(title=f"checkpoints ({tiers.cfg.local_dir})")
    for col in ("id", "step", "size", "state", "RPO", *[s.name for s in tiers.all], "hash"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["id"], str(r["step"]), f"{r['bytes'] / 2**20:.1f} MiB", r["state"],
                  f"{r['rpo_s']:.2f} s" if r["rpo_s"] is not None else "-",
                  *[r["tiers"][s.name] for s in tiers.all], f"{r['algo']}:{r['hash'][:12]}")
    console.print(t)
    console.print("RPO = staged -> committed in the region (measured on this node)")


@app.command("show")
def show(ckpt_id: str = typer.Argument("latest"), config: Path | None = ConfigOption,
         json_out: bool = JsonOption) -> None:
    """One checkpoint: manifest, items, per-chunk hashes, state times, tiers."""
    tiers = Tiers(_cfg(config))
    r = Restorer(tiers)
    ckpt_id = r.resolve_id(ckpt_id)
    m, src, _ = r.manifest(ckpt_id)
    cat = tiers.read_catalog(ckpt_id) or {}
    out = {"id": m.id, "step": m.step, "hash": m.hash, "algo": m.algo,
           "manifest_from": src, "states": cat.get("states") or m.states,
           "errors": cat.get("errors", {}), "tiers": _presence(tiers, ckpt_id),
           "items": [{"name": i.name, "size": i.size, "chunks": len(i.chunks), "hash": i.hash}
                     for i in m.items]}
    if json_out:
        emit_json(out)
        return
    console.print(f"[bold]{m.id}[/] step {m.step}  {m.algo}:{m.hash}  (manifest from {src})")
    console.print("  state times: wall clock of the saver (measured), + seconds since staged")
    for state, t in out["states"].items():
        console.print(f"  {state:<11} {_fmt_t(t)}  (+{t - out['states']['staged']:.3f} s)")
    console.print("  tiers: " + ", ".join(f"{k}={v}" for k, v in out["tiers"].items()))
    for k, v in out["errors"].items():
        console.print(f"  [yellow]{k}: {v}[/]")
    for i in out["items"]:
        console.print(f"  {i['name']:<40} {i['size']:>12,d} B {i['chunks']:>4} chunks "
                      f"{i['hash'][:16]}")


@app.command("verify")
def verify(ckpt_id: str = typer.Argument("latest"), config: Path | None = ConfigOption,
           tier: str | None = typer.Option(None, "--tier", help="Only this tier."),
           json_out: bool = JsonOption) -> None:
    """Check every chunk of every tier's copy against the manifest (changes nothing).

    Exit code 1 if a copy is corrupt.
    """
    tiers = Tiers(_cfg(config))
    r = Restorer(tiers)
    ckpt_id = r.resolve_id(ckpt_id)
    results = []
    for s in [tiers.store(tier)] if tier else tiers.all:
        try:
            results.append(r.verify(ckpt_id, s))
        except (StoreUnreachable, StoreAuthError) as err:
            results.append({"tier": s.name, "id": ckpt_id, "ok": None, "error": str(err)})
    if json_out:
        emit_json(results)
    else:
        for res in results:
            status = ("unreachable" if res["ok"] is None else "missing" if res.get("missing")
                      else "ok" if res["ok"] else f"CORRUPT {res['bad_chunks']}")
            console.print(f"{res['tier']:<12} {ckpt_id}: {status}")
    if any(res["ok"] is False and not res.get("missing") for res in results):
        raise typer.Exit(1)


@app.command("restore")
def restore(ckpt_id: str = typer.Argument("latest"), config: Path | None = ConfigOption,
            out: Path | None = typer.Option(None, "--out", help="Also copy the files here."),
            json_out: bool = JsonOption) -> None:
    """Read-through restore into the local cache (local, region, other regions, archive)."""
    tiers = Tiers(_cfg(config))
    probe = Restorer(tiers)
    ckpt_id = probe.resolve_id(ckpt_id)
    total = probe.manifest(ckpt_id)[0].total_bytes
    # The lease covers the copy to --out too: without it, gc could delete the cached files
    # between the restore and the copy.
    with tiers.lease(ckpt_id):
        with Progress(*Progress.get_default_columns()[:1], BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=console, disable=json_out,
                      transient=True) as bar:
            task = bar.add_task(f"restore {ckpt_id}", total=total)
            rep = Restorer(tiers, progress=lambda n: bar.advance(task, n)).restore(ckpt_id)
        if out:
            src = tiers.local.path(tiers.layout.data_prefix(rep.id))
            shutil.copytree(src, out, dirs_exist_ok=True)
    if json_out:
        emit_json(rep.as_dict())
        return
    console.print(f"restored {rep.id} ({rep.bytes / 2**20:.1f} MiB in {rep.seconds:.2f} s, "
                  f"measured): served by {rep.tier} (chunks per tier: {rep.served_by})")
    for k, v in rep.unreachable.items():
        console.print(f"  [yellow]{k} unreachable: {v}[/]")
    for b in rep.bad_chunks:
        console.print(f"  [red]bad chunk[/] {b['item']}#{b['chunk']} in {b['tier']}")
    if rep.repaired:
        console.print(f"  repaired: {', '.join(rep.repaired)}")


@app.command("gc")
def gc_cmd(config: Path | None = ConfigOption,
           dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would go."),
           json_out: bool = JsonOption) -> None:
    """Apply retention: last k local, n per region, every m-th archived; skip leased ones."""
    rep = gc(Tiers(_cfg(config)), dry_run=dry_run)
    if json_out:
        emit_json(rep.as_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    for tier, ids in rep.kept.items():
        console.print(f"{tier:<12} kept {len(ids)}; {verb} {rep.deleted.get(tier, [])}")
    if rep.skipped_leased:
        console.print(f"skipped (being saved or restored): {rep.skipped_leased}")
    for k, v in rep.unreachable.items():
        console.print(f"[yellow]{k} unreachable: {v}[/]")


@app.command("bench")
def bench(quick: bool = typer.Option(False, "--quick", help="Small sizes (CI smoke)."),
          json_out: bool = JsonOption) -> None:
    """Save stall vs memcpy, persist vs dd, restore vs direct S3 GET and boto3 (measured)."""
    res = run_benchmarks(quick=quick, log=(lambda s: None) if json_out else console.print)
    if json_out:
        emit_json(res)


def step_checkpoint(ctx: DemoContext) -> None:
    """Demo step: save a small state through every tier, restore it from a cold cache."""
    ctx.results["checkpoint"] = demo_checkpoint(ctx.data_dir, console.print, ctx.seed)
