"""`rackscale report ...`: the usable-capacity ledger and the HTML/JSON report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from rackscale.cli._common import (
    DbOption,
    JsonOption,
    check_out_dir,
    console,
    emit_json,
    noun,
    out_dir_option,
)
from rackscale.cli._pipeline import DemoContext, ReportStepResult
from rackscale.errors import UserError
from rackscale.inputs import load_json, read_text
from rackscale.provenance import basis_text
from rackscale.store import DEFAULT_DATA_DIR, Store

app = noun("Usable-capacity ledger and report: what survives of the headline GPU count.")

DEFAULT_OUT = f"{DEFAULT_DATA_DIR}/report"
BASIS_STYLE = {"spec": "blue", "inventory": "blue", "measured": "green",
               "simulated": "dark_orange", "recorded": "blue", "not_run": "dim"}

ShapeGpusOption = typer.Option(None, "--shape-gpus", min=1, show_default=False,
                               help="GPUs per NVLink domain the job shape needs (72: whole "
                               "NVL72 domains). Default: each rack's own whole domain (72 on "
                               "NVL72, 8 on an HGX node), named per pool.")
PriceOption = typer.Option(None, "--gpu-hour-price", metavar="FLOAT", show_default=False,
                           help="Price of one GPU-hour (any currency): the ledger shows what "
                           "each lost step costs per month.")
StageOption = typer.Option("domain", "--stages", help="Certification stages every domain "
                           "must have passed for the job shape, comma-separated: gpu, tray, "
                           "domain, multi-rack (or 1-4).")


class ReportFileError(UserError):
    pass


def _shape(gpus: int | None, stages_text: str) -> Any:
    from rackscale.report import JobShape

    stages = [x.strip() for x in stages_text.split(",") if x.strip()]  # as certify --stages
    if gpus is None:
        return JobShape(required_stages=tuple(stages))
    name = "whole-nvl72-domains" if gpus == 72 else f"domains-of-{gpus}"
    return JobShape(name=name, gpus_per_domain=gpus, required_stages=tuple(stages))


def _fmt(n: float) -> str:
    return f"{n:,.1f}" if float(n) % 1 else f"{int(n):,}"


SHORT = {"headline": "headline GPUs", "installed": "installed", "powered": "powered & cooled",
         "healthy": "healthy", "domain": "in healthy NVLink domain",
         "certified": "certified for job shape", "goodput": "expected goodput"}


def _reasons(step: dict[str, Any]) -> str:
    return ", ".join(f"{_fmt(v)} {k}" for k, v in step["lost"].items())


def ledger_table(ledger: list[dict[str, Any]], *, wide: bool) -> Table:
    """The ledger as a Rich table; `wide` adds the reasons and inputs columns (else the
    caller prints them below the table, one numbered line per step)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("step", no_wrap=True)
    table.add_column("GPUs", justify="right", no_wrap=True)
    table.add_column("lost", justify="right", no_wrap=True)
    table.add_column("basis", no_wrap=True)
    if wide:
        table.add_column("lost by reason", overflow="fold", max_width=44)
        table.add_column("inputs", overflow="fold", max_width=60)
    prev = None
    for n, s in enumerate(ledger, 1):
        basis = f"[{BASIS_STYLE.get(s['basis'], '')}]{basis_text(s['basis'])}[/]"
        if s.get("ci95"):
            basis += f"\n[dim]95% CI {_fmt(s['ci95'][0])}-{_fmt(s['ci95'][1])}[/]"
        lost = "" if prev is None else _fmt(round(prev - float(s["count"]), 1))
        row = [f"{n}. " + escape(SHORT.get(s["key"], s["label"])), _fmt(s["count"]), lost,
               basis]
        if wide:
            row += [escape(_reasons(s).replace(", ", "\n")) or "-",
                    f"[dim]{escape(s['source'])}[/]"]
        table.add_row(*row)
        prev = float(s["count"])
    return table


def print_ledger(doc: dict[str, Any]) -> None:
    wide = console.width >= 160
    console.print(f"[bold]usable capacity of {escape(doc['fleet']['fleet'])}[/] (job shape "
                  f"{escape(doc['job_shape']['name'])}; events up to seq "
                  f"{doc['last_event_seq']})", highlight=False)
    console.print(ledger_table(doc["ledger"], wide=wide))
    if not wide:
        for n, s in enumerate(doc["ledger"], 1):
            lost = f"lost {_reasons(s)}; " if s["lost"] else ""
            console.print(f"{n}. {escape(lost)}[dim]{escape(s['source'])}[/]",
                          highlight=False)
    if doc.get("job_shapes"):
        console.print(shapes_table(doc["job_shapes"]))
    if doc.get("cost"):
        cost = doc["cost"]
        lost = ", ".join(f"{s['step']} {s['per_month']:,.0f}" for s in cost["steps"]
                         if s["per_month"])
        console.print(f"cost per month at {cost['gpu_hour_price']:g} per GPU-hour: "
                      f"{escape(lost) or 'nothing lost'}; total {cost['total_per_month']:,.0f}",
                      highlight=False)
    for w in doc["warnings"]:
        console.print(f"[yellow]warning:[/] {escape(w)}")


def shapes_table(shapes: list[dict[str, Any]]) -> Table:
    """Job shapes side by side; the headline's shape is marked with *."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="job shapes (* = the ledger's)")
    for col, just in (("shape", "left"), ("template", "left"), ("GPUs/job", "right"),
                      ("jobs", "right"), ("certified", "right"), ("expected", "right")):
        table.add_column(col, justify=just, no_wrap=col == "shape")  # type: ignore[arg-type]  # rich's justify literals
    for s in shapes:
        table.add_row(("* " if s["headline"] else "  ") + escape(s["name"]),
                      escape(s["template"]), f"{s['gpus_per_job']:,}", f"{s['jobs']:,}",
                      _fmt(s["certified_gpus"]), _fmt(s["expected_gpus"]))
    return table


def _figure(step: dict[str, Any]) -> str:
    """A ledger count with what it rests on: measured, simulated, or why it is missing."""
    text = _fmt(step["count"])
    if step["basis"] == "not_run":
        return f"{text} ({step['note']})"
    return f"{text} [{basis_text(step['basis'])}]"


@app.command()
def build(
    db: str | None = DbOption,
    out: Path = out_dir_option(DEFAULT_OUT, "report.html and report.json"),
    shape_gpus: int | None = ShapeGpusOption,
    stages: str = StageOption,
    gpu_hour_price: float | None = PriceOption,
    as_json: bool = JsonOption,
) -> None:
    """Write report.html (self-contained), report.json, disclosure.json and the evidence
    bundle (evidence/) from the store."""
    from rackscale.report import build_report, check_price

    shape = _shape(shape_gpus, stages)
    price = check_price(gpu_hour_price)  # every check before the store opens or out is made
    check_out_dir(out)
    built = build_report(Store(db), out, shape=shape, gpu_hour_price=price)
    if as_json:
        emit_json({"html": str(built.html_path), "json": str(built.json_path),
                   "seconds": round(built.seconds, 3), "ledger": built.doc["ledger"],
                   "evidence": built.doc["evidence"], "cost": built.doc.get("cost")})
        return
    print_ledger(built.doc)
    console.print(f"wrote {escape(str(built.json_path))} and [bold]"
                  f"{escape(str(built.html_path))}[/] in {built.seconds:.2f} s")


@app.command()
def show(
    db: str | None = DbOption,
    shape_gpus: int | None = ShapeGpusOption,
    stages: str = StageOption,
    gpu_hour_price: float | None = PriceOption,
    as_json: bool = JsonOption,
) -> None:
    """Print the ledger: headline GPUs down to expected goodput, with reasons and sources."""
    from rackscale.report import check_price, report_document

    doc, _ = report_document(Store(db), shape=_shape(shape_gpus, stages),
                             gpu_hour_price=check_price(gpu_hour_price))
    if as_json:
        emit_json({"fleet": doc["fleet"], "job_shape": doc["job_shape"],
                   "ledger": doc["ledger"], "job_shapes": doc["job_shapes"],
                   "reasons": doc["reasons"],
                   "warnings": doc["warnings"], "cost": doc.get("cost")})
        return
    print_ledger(doc)


@app.command()
def validate(
    file: Path = typer.Argument(..., metavar="FILE", help="A report.json to check."),
) -> None:
    """Check a report.json against the published JSON Schema (exit 2 when it does not match)."""
    try:
        import jsonschema
    except ImportError:
        raise ReportFileError("validating needs the jsonschema package: pip install "
                              "'rackscale[test]' (or jsonschema)") from None

    from rackscale.report import validate_document

    doc = load_json(read_text(file, "report.json", error=ReportFileError), str(file),
                    error=ReportFileError)
    try:
        validate_document(doc)
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ReportFileError(f"{file}: {where}: {err.message}") from None
    console.print(f"[green]ok[/] {escape(str(file))} matches schema "
                  f"{escape(str(doc.get('schema_version')))}")


def _report_file(path: Path) -> dict[str, Any]:
    doc = load_json(read_text(path, "report.json", error=ReportFileError), str(path),
                    error=ReportFileError)
    if not isinstance(doc, dict):
        raise ReportFileError(f"{path}: a report.json is a JSON object; this file holds "
                              f"{type(doc).__name__}")
    return doc


def print_diff(diff: dict[str, Any]) -> None:
    """The diff in the terminal: ledger steps that changed (with the reason codes that moved),
    then findings new and cleared, racks and job shapes that changed."""
    old, new = diff["old"], diff["new"]
    console.print(f"[bold]report diff[/] {escape(str(old['fleet']))}: events up to seq "
                  f"{old['last_event_seq']} -> {new['last_event_seq']}", highlight=False)
    for side, stamp in (("old", old), ("new", new)):
        if stamp.get("source"):
            console.print(f"{side}: {escape(stamp['source'])}", highlight=False)
        for w in stamp.get("warnings") or []:
            console.print(f"[yellow]warning ({side}):[/] {escape(w)}")
    if diff["empty"]:
        console.print("no changes: same ledger, findings, racks and job shapes")
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="ledger")
    for col, just in (("step", "left"), ("before", "right"), ("now", "right"),
                      ("change", "right"), ("why (GPUs lost by reason, change)", "left")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]  # rich's justify literals
    for s in diff["ledger"]:
        why = "\n".join(f"{c} {d:+,g}" for c, d in s["lost_delta"].items())
        table.add_row(escape(SHORT.get(s["key"], s["label"])), _fmt(s["old"]), _fmt(s["new"]),
                      f"{s['delta']:+,g}", escape(why) or "-")
    if diff["ledger"]:
        console.print(table)
    for key, title in (("findings_new", "new finding"), ("findings_cleared",
                                                         "cleared finding")):
        for f in diff[key]:
            console.print(f"{title}: {escape(f['component'])} {escape(f['kind'])} "
                          f"({f['verdict']}, {f['dropped_gpus']} GPUs dropped)",
                          highlight=False)
    for r in diff["racks"]:
        console.print(f"rack {escape(r['id'])}: {r['change']} ({r['old_state']} -> "
                      f"{r['new_state']}, certified {r['old_usable']} -> {r['new_usable']})",
                      highlight=False)
    for s in diff["job_shapes"]:
        console.print(f"job shape {escape(s['name'])} ({escape(s['template'])}): certified "
                      f"{s['old']:,} -> {s['new']:,} ({s['delta']:+,})", highlight=False)


DiffRef = "a report.json file, or in the store (--db) a certification or simulation run " \
    "id, seq:N (the store up to event N) or latest"


def _report_at(ref: str, stores: dict[str, Any], db: str | None, shape: Any) -> tuple[
        dict[str, Any], str]:
    """(report document, what it is in words) of one side of a diff: the file when `ref`
    is one (or names a .json), else the store's report at the point `ref` names."""
    path = Path(ref)
    if path.exists() or ref.endswith(".json"):
        return _report_file(path), f"file {ref}"
    from rackscale.report import document_at, resolve_point

    if "store" not in stores:  # opened once for both sides, read-only
        stores["store"] = Store(db, readonly=True)
    point = resolve_point(stores["store"], ref)
    return document_at(stores["store"], point, shape=shape), point.what


@app.command()
def diff(
    old: str = typer.Argument(..., metavar="OLD", help=f"The earlier report: {DiffRef}."),
    new: str = typer.Argument(..., metavar="NEW", help=f"The later report: {DiffRef}."),
    db: str | None = DbOption,
    shape_gpus: int | None = ShapeGpusOption,
    stages: str = StageOption,
    as_json: bool = JsonOption,
) -> None:
    """What changed between two reports and why: ledger deltas per step with their reason
    codes, findings new and cleared, racks that changed, job shapes. Each side is a
    report.json, or a run in the store, whose report is built as the store stood then
    (--shape-gpus and --stages apply to those)."""
    from rackscale.report import diff_documents

    shape = _shape(shape_gpus, stages)
    stores: dict[str, Any] = {}
    try:
        (old_doc, old_what), (new_doc, new_what) = (_report_at(r, stores, db, shape)
                                                    for r in (old, new))
    finally:
        if "store" in stores:
            stores["store"].close()
    result = diff_documents(old_doc, new_doc)
    for side, doc, what in (("old", old_doc, old_what), ("new", new_doc, new_what)):
        result[side] |= {"source": what, "warnings": list(doc.get("warnings") or [])}
    if as_json:
        emit_json(result)
        return
    print_diff(result)


@app.command()
def schema() -> None:
    """Print the JSON Schema of report.json."""
    from rackscale.report import report_schema

    emit_json(report_schema())


def step_report(ctx: DemoContext) -> None:
    """Demo step: build the report into the data dir, print the ledger and where it is."""
    from rackscale.cli.statement import demo_statement
    from rackscale.report import build_report

    ckpt = ctx.results.checkpoint
    # The demo's checkpoint save/restore was measured on this host; it joins the evidence.
    extra = {"checkpoint": ckpt.as_dict() | {
        "where": "rackscale demo, this host",
        "on": f"checkpoint tiers under {ctx.data_dir}/checkpoints"}} if ckpt else None
    built = build_report(ctx.store, ctx.data_dir / "report", extra=extra)
    doc = built.doc
    print_ledger(doc)
    steps = {s["key"]: s for s in doc["ledger"]}
    head, cert, good = steps["headline"], steps["certified"], steps["goodput"]
    share = float(good["count"]) / float(head["count"]) if head["count"] else 0.0
    console.print(
        f"{_fmt(head['count'])} headline GPUs -> {_figure(cert)} certified for "
        f"{doc['job_shape']['name']} -> {_figure(good)} expected under failures "
        f"({share:.0%} of headline); {len(doc['findings'])} findings; report built in "
        f"{built.seconds:.2f} s (measured)", highlight=False, markup=False)
    verified = demo_statement(ctx.data_dir, ctx.data_dir / "report")
    console.print(f"report: [bold]{escape(str(built.html_path.resolve()))}[/]")
    ctx.results.report = ReportStepResult(
        html=built.html_path, json=built.json_path,
        ledger={k: s["count"] for k, s in steps.items()},
        evidence_root=doc["evidence"]["root"], verified=verified)
