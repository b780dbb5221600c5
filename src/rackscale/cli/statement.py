"""`rackscale report keygen|sign|verify|redact`: the report as a verifiable statement."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from rackscale.cli._common import JsonOption, check_out_file, console, emit_json
from rackscale.cli.report import app as app  # re-exported: these commands are on report's app

DirArgument = typer.Argument(..., metavar="DIR", help="A report directory written by "
                             "`rackscale report build --out DIR`.")
KeyOption = typer.Option(..., "--key", metavar="FILE", help="The private key file (PEM, "
                         "mode 0600); never given on the command line itself.")


@app.command()
def keygen(
    key: Path = typer.Option(..., "--key", metavar="FILE", help="Where to write the new "
                             "private key (mode 0600); the public key goes to FILE.pub."),
    redaction: bool = typer.Option(False, "--redaction", help="Write a secret redaction key "
                                   "(for `report redact`) instead of a signing key pair."),
    force: bool = typer.Option(False, "--force", help="Replace key files that exist."),
    as_json: bool = JsonOption,
) -> None:
    """Make an Ed25519 signing key pair (or, with --redaction, a redaction secret)."""
    from rackscale.report import keygen as make
    from rackscale.report import write_redaction_key

    # Both files can be written (not a directory, /proc or a read-only place) before either is.
    check_out_file(key, "--key")
    if not redaction:
        check_out_file(key.with_name(key.name + ".pub"), "--key (its FILE.pub)")
    if redaction:
        out: dict[str, Any] = {"redaction_key": str(write_redaction_key(key, force=force))}
    else:
        priv, pub, kid = make(key, force=force)
        out = {"private_key": str(priv), "public_key": str(pub), "key_id": kid}
    if as_json:
        emit_json(out)
        return
    for name, value in out.items():
        console.print(f"{name.replace('_', ' ')}: {escape(value)}", highlight=False)


@app.command()
def sign(
    out: Path = DirArgument,
    key: Path = KeyOption,
    as_json: bool = JsonOption,
) -> None:
    """Sign a report directory: its evidence root, report.json and disclosure.json."""
    from rackscale.report import sign_bundle, stamp_page

    sig = sign_bundle(out, key)
    stamp_page(out, {"key_id": sig["key_id"], "verified": None})
    if as_json:
        emit_json({"signature": str(out / "signature.json"), "key_id": sig["key_id"],
                   "statement": sig["statement"]})
        return
    console.print(f"signed {escape(str(out))} (evidence {sig['statement']['evidence_root']}) "
                  f"with {sig['key_id']}", highlight=False)


# A check the verifier could not run fails nothing but is no "ok": it is printed as skip.
MARKS = {"ok": "[green]ok[/]  ", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}


def print_verification(result: Any) -> None:
    for c in result.checks:
        mark = MARKS[c.status]
        console.print(f"{mark} {escape(c.name)}: {escape(c.detail)}", highlight=False)
    if result.ok:
        console.print(f"[bold green]verified[/] {escape(', '.join(result.covered))} of "
                      f"{escape(result.bundle)}: evidence {result.root}, signed by "
                      f"{escape(str(result.key_id))}", highlight=False)
        console.print("report.html is not covered (a page rendered from report.json); "
                      "`report verify --update-html` renders it again from the verified "
                      "report.json", highlight=False)
    else:
        console.print(f"[bold red]not verified[/]: {escape(result.first_problem or '')}",
                      highlight=False)


@app.command()
def verify(
    out: Path = DirArgument,
    pubkey: Path = typer.Option(..., "--pubkey", metavar="FILE", help="The signer's public "
                                "key (FILE.pub of `report keygen`)."),
    update_html: bool = typer.Option(False, "--update-html", help="Write the verification "
                                     "status into the directory's report.html."),
    as_json: bool = JsonOption,
) -> None:
    """Check the signature and every hash, recompute the ledger from the evidence and confirm
    every figure (exit 0), or name the first that differs (exit 1)."""
    from datetime import UTC, datetime

    from rackscale.report import load_valid_report, stamp_page, verify_bundle

    if update_html:  # refused before anything is checked or written
        load_valid_report(out)
    result = verify_bundle(out, pubkey)
    if update_html:
        stamp_page(out, {"key_id": result.key_id, "verified": result.ok,
                         "detail": result.first_problem or "",
                         "checked_at": datetime.now(UTC).isoformat()})
    if as_json:
        emit_json(result.as_dict())
    else:
        print_verification(result)
    if not result.ok:
        raise typer.Exit(1)


@app.command()
def redact(
    src: Path = DirArgument,
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Directory to write the "
                             "redacted report into (created when missing)."),
    redaction_key: Path = typer.Option(..., "--redaction-key", metavar="FILE", help="The "
                                       "secret redaction key (`report keygen --redaction`)."),
    as_json: bool = JsonOption,
) -> None:
    """Write a copy of a report whose region and rack names are keyed pseudonyms; sign the
    copy with `report sign` to publish it."""
    from rackscale.report import load_redaction_key, redact_bundle

    doc = redact_bundle(src, out, load_redaction_key(redaction_key))
    if as_json:
        emit_json({"out": str(out), "evidence_root": doc["evidence"]["root"],
                   "ledger": {s["key"]: s["count"] for s in doc["ledger"]}})
        return
    console.print(f"wrote the redacted report to {escape(str(out))} (evidence "
                  f"{doc['evidence']['root']}); sign it with `rackscale report sign "
                  f"{escape(str(out))} --key FILE`", highlight=False)


def demo_statement(data_dir: Path, report_dir: Path) -> bool:
    """Demo step: sign the report with the demo key (made on first use) and verify it."""
    from datetime import UTC, datetime

    from rackscale.report import keygen as make
    from rackscale.report import sign_bundle, stamp_page, verify_bundle

    key = data_dir / "keys" / "demo-signing.pem"
    if not key.exists():
        make(key)
    sig = sign_bundle(report_dir, key)
    result = verify_bundle(report_dir, key.with_name(key.name + ".pub"))
    stamp_page(report_dir, {"key_id": sig["key_id"], "verified": result.ok,
                            "detail": result.first_problem or "",
                            "checked_at": datetime.now(UTC).isoformat()})
    state = "[green]verified[/]" if result.ok else f"[red]NOT verified[/]: " \
        f"{escape(result.first_problem or '')}"
    console.print(f"statement: evidence {escape(str(result.root))}, signed with the demo key "
                  f"{sig['key_id']} ({escape(str(key))}), {state}", highlight=False)
    return result.ok
