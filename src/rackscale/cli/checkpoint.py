"""`rackscale checkpoint ls|show|verify|restore|gc|import|bench|profile`: tiered checkpoints.

Without --config every tier is a directory under ./rackscale-data/checkpoints (the embedded
default); with --config a YAML/JSON tiers file (S3 endpoints, keys named by env variables).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from rackscale.checkpoint import (
    Restorer,
    Tiers,
    TiersConfig,
    catalog_of,
    default_config,
    demo_checkpoint,
    gc,
    listing_rows,
    load_config,
    run_benchmarks,
    tier_presence,
)
from rackscale.cli._common import (
    DbOption,
    JsonOption,
    check_out_dir,
    console,
    emit_json,
    err_console,
    noun,
)
from rackscale.cli._pipeline import DemoContext
from rackscale.cli.fleet import existing_store
from rackscale.store import DEFAULT_DATA_DIR, loaded_spec

app = noun("Tiered checkpoints: local NVMe, region S3, other regions, archive.")
ConfigOption = typer.Option(None, "--config", metavar="FILE", help="Tiers config (YAML/JSON); "
                            "default: directories under ./rackscale-data/checkpoints, one per "
                            "region of the fleet loaded in --db.")


CkptArg = typer.Argument("latest", metavar="CKPT", help="Checkpoint id, or latest.")


def _cfg(config: Path | None, db: str | None) -> TiersConfig:
    """--config, else the directory default with one tier per region of the fleet loaded in
    --db (the seed fleet's two regions when none is loaded)."""
    if config:
        return load_config(config)
    store = existing_store(db)
    spec = loaded_spec(store) if store is not None else None
    if spec is None:
        return default_config(DEFAULT_DATA_DIR)
    return default_config(DEFAULT_DATA_DIR, [r.name for r in spec.regions])


def _fmt_t(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


def _warn_problems(r: Restorer, ckpt_id: str | None = None) -> None:
    """Say what was skipped and why; the command still answers from the good tiers."""
    for tier, why in r.unreachable.items():
        err_console.print(f"[yellow]{tier} unreachable:[/] {escape(why)}", soft_wrap=True)
    for cid, bad in r.bad_manifests.items():
        if ckpt_id is None or cid == ckpt_id:
            for why in bad.values():  # each reason starts with its tier and key
                err_console.print(f"[yellow]damaged manifest of {cid} skipped:[/] "
                                  f"{escape(why)}", soft_wrap=True)
    for why in r.bad_latest.values():
        err_console.print(f"[yellow]latest pointer ignored:[/] {escape(why)}", soft_wrap=True)
    for where in r.quarantined:
        err_console.print(f"[yellow]bad local copy set aside in {escape(where)}[/]")


@app.command("ls")
def ls(config: Path | None = ConfigOption, db: str | None = DbOption,
       json_out: bool = JsonOption) -> None:
    """List committed checkpoints, their state, RPO and which tiers hold them.

    Exit code 2 if a tier could not be reached (the table shows what the others hold),
    1 if a manifest is damaged.
    """
    tiers = Tiers(_cfg(config, db))
    r = Restorer(tiers)
    notes: list[str] = []
    rows = listing_rows(tiers, r, notes)
    if json_out:
        emit_json({"checkpoints": rows, "unreachable": r.unreachable,
                   "damaged": r.bad_manifests, "notes": notes})
    else:
        t = Table(title=f"checkpoints ({tiers.cfg.local_dir})")
        for col in ("id", "step", "size", "state", "RPO", *[s.name for s in tiers.all], "hash"):
            t.add_column(col)
        for row in rows:
            size = f"{row['bytes'] / 2**20:.1f} MiB" if row["bytes"] is not None else "-"
            t.add_row(row["id"], str(row["step"]), size, row["state"],
                      f"{row['rpo_s']:.2f} s" if row["rpo_s"] is not None else "-",
                      *[row["tiers"][s.name] for s in tiers.all],
                      f"{row['algo']}:{row['hash'][:12]}" if row["hash"] else "-")
        console.print(t)
        console.print("RPO = staged -> committed in the region (measured on this node)")
        _warn_problems(r)
        for note in notes:
            err_console.print(f"[yellow]{escape(note)}[/]", soft_wrap=True)
    if r.unreachable:
        raise typer.Exit(2)
    if r.bad_manifests:
        raise typer.Exit(1)


@app.command("show")
def show(ckpt_id: str = CkptArg, config: Path | None = ConfigOption,
         db: str | None = DbOption, json_out: bool = JsonOption) -> None:
    """One checkpoint: manifest, items, per-chunk hashes, state times, tiers."""
    tiers = Tiers(_cfg(config, db))
    r = Restorer(tiers)
    ckpt_id = r.resolve_id(ckpt_id)
    m, src, _ = r.manifest(ckpt_id)
    notes: list[str] = []
    cat = catalog_of(tiers, ckpt_id, notes)
    out = {"id": m.id, "step": m.step, "hash": m.hash, "algo": m.algo, "version": m.version,
           "manifest_from": src, "states": cat.get("states") or m.states,
           "errors": cat.get("errors", {}), "tiers": tier_presence(tiers, r, ckpt_id, m),
           "items": [{"name": i.name, "size": i.size, "chunks": len(i.chunks), "hash": i.hash}
                     for i in m.items],
           "unreachable": r.unreachable, "damaged": r.bad_manifests.get(ckpt_id, {}),
           "bad_latest": r.bad_latest}
    if json_out:
        emit_json(out)
        return
    console.print(f"[bold]{m.id}[/] step {m.step}  {m.algo}:{m.hash}  (manifest v{m.version} "
                  f"from {src})")
    console.print("  state times: wall clock of the saver (measured), + seconds since staged")
    for state, t in out["states"].items():
        console.print(f"  {state:<11} {_fmt_t(t)}  (+{t - out['states']['staged']:.3f} s)")
    console.print("  tiers: " + ", ".join(f"{k}={v}" for k, v in out["tiers"].items()))
    for k, v in out["errors"].items():
        console.print(f"  [yellow]{k}: {escape(str(v))}[/]")
    for i in out["items"]:
        console.print(f"  {escape(i['name']):<40} {i['size']:>12,d} B {i['chunks']:>4} chunks "
                      f"{i['hash'][:16]}")
    _warn_problems(r, ckpt_id)


_FAILED = {"missing", "corrupt", "bad-manifest", "differs", "unreachable"}


@app.command("verify")
def verify(ckpt_id: str = CkptArg, config: Path | None = ConfigOption,
           tier: str | None = typer.Option(None, "--tier", help="Only this tier."),
           db: str | None = DbOption, json_out: bool = JsonOption) -> None:
    """Check each tier's copy: its manifest, every object's size, every chunk (changes nothing).

    Exit code 1 unless every tier that holds a manifest verified and at least one did: a
    missing object, a bad chunk or size, a damaged manifest, a tier holding another save or
    a tier that could not be reached all fail (with --tier, so does a tier without a copy).
    """
    tiers = Tiers(_cfg(config, db))
    r = Restorer(tiers)
    ckpt_id = r.resolve_id(ckpt_id)
    results = [r.verify(ckpt_id, s) for s in ([tiers.store(tier)] if tier else tiers.all)]
    if json_out:
        emit_json(results)
    else:
        for res in results:
            status = res["status"].upper() if res["status"] in _FAILED else res["status"]
            detail = "".join(f" {k}={res[k]}" for k in ("missing", "bad_sizes", "bad_chunks")
                             if res[k])
            if res["version"] == 1:
                detail += " (manifest v1: sizes and dtype/shape checked, not hash-bound)"
            console.print(f"{res['tier']:<12} {ckpt_id}: {status}{escape(detail)}")
            if res["error"] and res["status"] != "ok":
                console.print(f"{'':<12} {escape(res['error'])}", soft_wrap=True)
        _warn_problems(r, ckpt_id)
    failed = any(res["status"] in _FAILED for res in results)
    if failed or not any(res["ok"] for res in results):
        raise typer.Exit(1)


@app.command("restore")
def restore(ckpt_id: str = CkptArg, config: Path | None = ConfigOption,
            out: Path | None = typer.Option(None, "--out", metavar="DIR", help="Directory to "
                                            "copy the restored files into (created when "
                                            "missing)."),
            db: str | None = DbOption, json_out: bool = JsonOption) -> None:
    """Read-through restore into the local cache (local, region, other regions, archive)."""
    if out is not None:
        check_out_dir(out)  # before the restore: a bad --out wastes no transfer
    tiers = Tiers(_cfg(config, db))
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
            rep = Restorer(tiers, progress=lambda n: bar.advance(task, n),
                           like=probe).restore(ckpt_id)
        if out:
            src = tiers.local.path(tiers.layout.data_prefix(rep.id))
            shutil.copytree(src, out, dirs_exist_ok=True)
    rep.bad_latest = probe.bad_latest | rep.bad_latest
    if json_out:
        emit_json(rep.as_dict())
        return
    console.print(f"restored {rep.id} ({rep.bytes / 2**20:.1f} MiB in {rep.seconds:.2f} s, "
                  f"measured): served by {rep.tier} (chunks per tier: {rep.served_by})")
    for k, v in rep.unreachable.items():
        console.print(f"  [yellow]{k} unreachable: {escape(v)}[/]")
    for v in rep.bad_manifests.values():  # each reason starts with its tier and key
        console.print(f"  [yellow]damaged manifest skipped: {escape(v)}[/]")
    for v in rep.bad_latest.values():
        console.print(f"  [yellow]latest pointer ignored: {escape(v)}[/]")
    for where in rep.quarantined:
        console.print(f"  [yellow]bad local copy set aside in {escape(where)}[/]")
    for b in rep.bad_sizes:
        console.print(f"  [red]wrong size[/] {escape(b['item'])} in {b['tier']}: {b['size']} B, "
                      f"manifest says {b['expected']} B")
    for b in rep.bad_chunks:
        console.print(f"  [red]bad chunk[/] {escape(b['item'])}#{b['chunk']} in {b['tier']}")
    for b in rep.missing:
        console.print(f"  [red]missing[/] {escape(b['item'])} in {b['tier']} (its manifest is "
                      f"there): served by another tier")
    if rep.repaired:
        console.print(f"  repaired: {escape(', '.join(rep.repaired))}")


@app.command("gc")
def gc_cmd(config: Path | None = ConfigOption,
           dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would go."),
           db: str | None = DbOption, json_out: bool = JsonOption) -> None:
    """Apply retention: last k local, n per region, every m-th archived; skip leased ones."""
    rep = gc(Tiers(_cfg(config, db)), dry_run=dry_run)
    if json_out:
        emit_json(rep.as_dict())
        return
    verb = "would delete" if dry_run else "deleted"
    for tier, ids in rep.kept.items():
        console.print(f"{tier:<12} kept {len(ids)}; {verb} {rep.deleted.get(tier, [])}")
    if rep.skipped_leased:
        console.print(f"skipped (being saved or restored): {rep.skipped_leased}")
    for k, v in rep.unreachable.items():
        console.print(f"[yellow]{k} unreachable: {escape(v)}[/]")
    if rep.damaged:
        console.print(f"[yellow]kept, manifest damaged (see `checkpoint verify`): "
                      f"{escape(', '.join(rep.damaged))}[/]")


@app.command("import")
def import_cmd(src: Path = typer.Argument(..., metavar="DIR", help="Directory written by "
                                          "torch's FileSystemWriter (.metadata + *.distcp)."),
               step: int = typer.Option(..., "--step", help="Training step it holds."),
               ckpt_id: str | None = typer.Option(None, "--id", metavar="CKPT",
                                                  help="Checkpoint id; default step-NNNNNNNN."),
               config: Path | None = ConfigOption, db: str | None = DbOption,
               json_out: bool = JsonOption) -> None:
    """Adopt a torch DCP checkpoint: hash and commit it, push it through the tiers."""
    from rackscale.checkpoint import import_dcp

    t0 = time.perf_counter()
    rep = import_dcp(_cfg(config, db), src, step, ckpt_id)
    if json_out:
        emit_json(rep.as_dict())
        return
    console.print(f"imported {escape(str(src))} as {rep.id}: {rep.total_bytes / 2**20:.1f} MiB "
                  f"in {time.perf_counter() - t0:.2f} s (measured), state {list(rep.states)[-1]}")
    for k, v in rep.errors.items():
        console.print(f"  [yellow]{escape(k)}: {escape(v)}[/] (it stays local; `resume()` of "
                      f"a later saver pushes it)")


@app.command("bench")
def bench(quick: bool = typer.Option(False, "--quick", help="Small sizes (CI smoke)."),
          json_out: bool = JsonOption) -> None:
    """Save stall vs memcpy, persist vs dd, restore vs direct S3 GET and boto3 (measured)."""
    res = run_benchmarks(quick=quick, log=(lambda s: None) if json_out else console.print)
    if json_out:
        emit_json(res)


@app.command("profile")
def profile_cmd(
    config: Path | None = ConfigOption,
    ckpt_size: list[str] = typer.Option(["64MiB"], "--ckpt-size", metavar="TEXT",
                                        help="A checkpoint size to "
                                        "measure on this node (repeatable): 64MiB, 1GiB ..."),
    reps: int = typer.Option(3, "--reps", help="Runs per figure (the median is kept)."),
    out: Path = typer.Option(DEFAULT_DATA_DIR, "--out", metavar="DIR", help="Directory to "
                             "write storage-profile.json into (created when missing)."),
    db: str | None = DbOption, json_out: bool = JsonOption,
) -> None:
    """Measure the tiers: save stall, time to durable local/region/replicated, restore per tier."""
    from rackscale.cli.storage import run_profile

    run_profile(_cfg(config, db), ckpt_size, reps, out, json_out)


def step_checkpoint(ctx: DemoContext) -> None:
    """Demo step: save a small state through every tier, restore it from a cold cache."""
    ctx.results.checkpoint = demo_checkpoint(ctx.data_dir, console.print, ctx.seed)
