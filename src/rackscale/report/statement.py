"""A report directory as a statement: report.json + disclosure.json + the evidence bundle.

One owner for "the document the evidence gives": `document_of(view, params, generated_at)`
is what `build` writes and what `verify` recomputes (the same ledger and document code, from a
StoreView read from the store or rebuilt from the bundle), so the two can only differ when the
files do.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.report.bundle import (
    EVIDENCE_FORMAT,
    RECOVERY_FILE,
    decode,
    evidence_files,
    extras_of,
    manifest_of,
    read_file,
    root_of,
    view_from_evidence,
    write_evidence,
)
from rackscale.report.cost import cost_section
from rackscale.report.disclosure import build_disclosure
from rackscale.report.document import build_document, finite
from rackscale.report.ledger import JobShape, Ledger, build_ledger
from rackscale.report.recovery import recovery_section
from rackscale.report.soak import soak_section
from rackscale.report.storeview import StoreView

# Fields of report.json that the evidence does not determine: when and how fast it was built,
# the name of its own bundle (checked against the manifest and the signature instead), and
# its comparison with earlier reports built into the same directory (`history`, `changes`:
# about other reports, not this evidence; covered by the signature like the rest).
NOT_RECOMPUTED = ("generated_at", "build_s", "evidence", "history", "changes")


class ReportDirError(UserError):
    pass


def params_of(shape: JobShape, gpu_hour_price: float | None) -> dict[str, Any]:
    """The report's own inputs, kept in the evidence so the evidence alone fixes the result."""
    return {"job_shape": {"name": shape.name, "gpus_per_domain": shape.gpus_per_domain,
                          "required_stages": list(shape.required_stages)},
            "gpu_hour_price": gpu_hour_price}


def shape_of(params: dict[str, Any]) -> JobShape:
    js = params.get("job_shape") or {}
    try:
        gpus = js["gpus_per_domain"]
        return JobShape(name=str(js["name"]), gpus_per_domain=None if gpus is None else int(gpus),
                        required_stages=tuple(js["required_stages"]))
    except (KeyError, TypeError, ValueError) as err:
        raise ReportDirError(f"evidence/meta.json: params.job_shape is incomplete ({err})") \
            from None


def document_of(view: StoreView, params: dict[str, Any], *, generated_at: datetime | None = None,
                build_s: float | None = None,
                recovery: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], Ledger]:
    """The report document the inputs give: ledger, document, the recovery and soak
    sections from the recovery events (as the bundle's recovery.jsonl holds them), and cost
    when priced."""
    ledger = build_ledger(view, shape_of(params))
    doc = build_document(view, ledger, build_s=build_s, generated_at=generated_at)
    doc["recovery"] = finite(recovery_section(recovery))
    doc["soak"] = finite(soak_section(recovery))
    price = params.get("gpu_hour_price")
    if price is not None:
        doc["cost"] = cost_section(doc["ledger"], float(price))
    return doc, ledger


def write_statement(out: Path, view: StoreView, doc: dict[str, Any], params: dict[str, Any],
                    *, extra: dict[str, Any] | None = None,
                    extra_events: dict[str, list[Any]] | None = None) -> str:
    """Write the evidence bundle and disclosure.json; name the bundle in `doc` (the caller
    writes report.json). A rebuilt report invalidates an old signature, so it is removed."""
    files = evidence_files(view, params, extra=_jsonable(extra), extra_events=extra_events)
    root = write_evidence(out, files)
    doc["evidence"] = {"format": EVIDENCE_FORMAT, "root": root, "files": len(files),
                       "dir": "evidence"}
    disclosure = build_disclosure(doc, extras_of(files), root)
    write_atomic(out / "disclosure.json", json.dumps(disclosure, indent=2, allow_nan=False)
                 + "\n")
    (out / "signature.json").unlink(missing_ok=True)
    return root


def _jsonable(extra: dict[str, Any] | None) -> dict[str, Any] | None:
    # The demo's figures hold numpy scalars and the like; the evidence holds their JSON form.
    return None if extra is None else json.loads(json.dumps(extra, default=str))


def load_report(out: Path) -> dict[str, Any]:
    if not out.is_dir():
        raise ReportDirError(f"{out}: no such directory; give the --out directory of "
                             "`rackscale report build`")
    path = out / "report.json"
    if not path.is_file() and not path.is_symlink():
        raise ReportDirError(f"{path}: missing; {out} is not a report directory")
    doc = decode(read_file(path), str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("fleet"), dict):
        raise ReportDirError(f"{path}: not a rackscale report (no fleet object)")
    return doc


def load_valid_report(out: Path) -> dict[str, Any]:
    """report.json of `out`, refused (exit 2) unless it matches the published schema: `sign`
    and `verify --update-html` render the page from it, and a report that is not one failed
    halfway (a KeyError after signature.json was written)."""
    doc = load_report(out)
    try:
        import jsonschema
    except ImportError:  # a test extra: without it, render now, before anything is written
        jsonschema = None  # type: ignore[assignment]  # the module, or None when not installed
    if jsonschema is not None:
        from rackscale.report.document import validate_document

        try:
            validate_document(doc)
        except jsonschema.ValidationError as err:
            where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
            raise ReportDirError(f"{out / 'report.json'}: does not match the report schema at "
                                 f"{where} ({err.message}); nothing was written. Rebuild it "
                                 "with `rackscale report build`") from None
    return doc


def recompute(files: dict[str, bytes], generated_at: str | None) -> tuple[
        dict[str, Any], dict[str, Any]]:
    """(report document, disclosure) recomputed from the evidence files alone."""
    view, params = view_from_evidence(files)
    when = None
    if isinstance(generated_at, str):
        try:
            when = datetime.fromisoformat(generated_at)
        except ValueError:
            when = None
    extras = extras_of(files)
    doc, _ = document_of(view, params, generated_at=when,
                         recovery=extras.get(RECOVERY_FILE))
    doc = json.loads(json.dumps(doc, default=str, allow_nan=False))  # as report.json holds it
    root = root_of(manifest_of(files))
    return doc, build_disclosure(doc, extras, root)


# ------------------------------------------------------------------ naming a difference
_STEP_FIELDS = ("count", "lost", "basis", "reason", "ci95", "source", "label", "note",
                "provenance", "key")


def _show(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first JSON path (in document order) where `a` and `b` differ."""
    if a == b:  # C-speed equality first: a whole agreeing section costs one comparison
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(b) + [k for k in a if k not in b]:
            if k not in a or k not in b:
                return f"{path}.{k}".lstrip("."), a.get(k, "(absent)"), b.get(k, "(absent)")
            found = first_difference(a[k], b[k], f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found:
                return found
        if len(a) != len(b):
            return f"{path} (length)".lstrip("."), len(a), len(b)
        return None
    if a != b or isinstance(a, bool) != isinstance(b, bool):
        return path.lstrip("."), a, b
    return None


# Sections added to report.json after reports were first signed: a report from before one
# has no such key, and agrees with its evidence when that evidence gives the section nothing
# (`not_run`); evidence that gives it something still disagrees with the missing section.
LATER_SECTIONS = frozenset({"soak"})


def _not_run(section: Any) -> bool:
    return isinstance(section, dict) and section.get("status") == "not_run"


def ledger_difference(reported: dict[str, Any], recomputed: dict[str, Any]) -> str | None:
    """The first ledger step and figure where report.json and the evidence disagree, then
    the first other figure; None when every figure agrees."""
    got, want = reported.get("ledger"), recomputed["ledger"]
    if not isinstance(got, list) or len(got) != len(want):
        return (f"ledger: report.json has {len(got) if isinstance(got, list) else 'no'} steps, "
                f"the evidence gives {len(want)}")
    for n, (r, c) in enumerate(zip(got, want, strict=True), 1):
        if not isinstance(r, dict):
            return f"ledger step {n}: not an object in report.json"
        for f in _STEP_FIELDS:
            found = first_difference(r.get(f), c.get(f), f)
            if found:
                where, x, y = found
                return (f"ledger step {n} ({c['key']}): {where}: report.json says {_show(x)}, "
                        f"the evidence gives {_show(y)}")
    rest_r = {k: v for k, v in reported.items() if k not in NOT_RECOMPUTED and k != "ledger"}
    rest_c = {k: v for k, v in recomputed.items() if k not in NOT_RECOMPUTED and k != "ledger"
              and not (k in LATER_SECTIONS and k not in reported and _not_run(v))}
    found = first_difference(rest_r, rest_c)
    if found:
        where, x, y = found
        return f"report.json {where}: says {_show(x)}, the evidence gives {_show(y)}"
    return None


def stamp_page(out: Path, status: dict[str, Any]) -> Path:
    """Re-render report.html with the signature/verification status (the page is derived
    from report.json and is not itself signed)."""
    from rackscale.report.page import render_html

    path = out / "report.html"
    write_atomic(path, render_html(load_valid_report(out), status))
    return path
