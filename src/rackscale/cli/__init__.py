"""The `rackscale` command: a Typer noun tree (`rackscale fleet|certify|lifecycle|...`).

Each noun lives in its own module here and is listed in `NOUNS`; `demo` runs the main job. A
command imports only its own noun's module: importing all of them (the simulator, the
checkpoint tiers, the server, the lab) cost every command 0.5 s before it started.
`rackscale --help`, a mistyped noun and `app` (what tests invoke) build the whole tree.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Iterable
from typing import Any

import typer

from rackscale import __version__
from rackscale.cli._common import RackscaleGroup

# noun -> (module, attribute): a Typer app becomes a command group, a function a command.
# The order is the order `rackscale --help` lists them in.
NOUNS: dict[str, tuple[str, str]] = {
    "fleet": ("rackscale.cli.fleet", "app"),
    "lifecycle": ("rackscale.cli.lifecycle", "app"),
    "certify": ("rackscale.cli.certify", "app"),
    "checkpoint": ("rackscale.cli.checkpoint", "app"),
    "simulate": ("rackscale.cli.simulate", "app"),
    "report": ("rackscale.cli.report", "app"),
    "lab": ("rackscale.cli.lab", "app"),
    "job": ("rackscale.cli.job", "app"),
    "telemetry": ("rackscale.cli.telemetry", "app"),
    "serve": ("rackscale.cli.serve", "serve"),
    "demo": ("rackscale.cli.demo", "demo"),
}
# Modules that add commands to another noun's app when imported (report keygen, sign, ...).
EXTENDS: dict[str, tuple[str, ...]] = {"report": ("rackscale.cli.statement",)}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rackscale {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Operator software that makes many GPU racks behave as one machine."""


def build_app(nouns: Iterable[str] | None = None) -> typer.Typer:
    """The command tree with `nouns` (default: every noun) registered."""
    root = typer.Typer(
        cls=RackscaleGroup,
        name="rackscale",
        help="Operator software that makes many GPU racks behave as one machine.",
        no_args_is_help=True,
        add_completion=False,
    )
    root.callback()(_root)
    wanted = set(NOUNS if nouns is None else nouns)
    for name, (module, attr) in NOUNS.items():
        if name not in wanted:
            continue
        target = getattr(importlib.import_module(module), attr)
        for extra in EXTENDS.get(name, ()):
            importlib.import_module(extra)
        if isinstance(target, typer.Typer):
            root.add_typer(target, name=name)
        else:
            root.command(name)(target)
    return root


def invoked_noun(argv: list[str]) -> str | None:
    """The noun a command line runs (None: a root option such as --help, or no known noun,
    which the whole tree answers with its listing or its suggestion)."""
    if not argv or argv[0].startswith("-") or argv[0] not in NOUNS:
        return None
    return argv[0]


def __getattr__(name: str) -> Any:
    # `app`, the whole tree, built on first use (tests invoke it with Typer's CliRunner).
    if name == "app":
        globals()["app"] = tree = build_app()
        return tree
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A command over a 128k-GPU fleet allocates a few hundred thousand long-lived objects (ids,
# conditions, rows); at the default gen-0 threshold (700) the collector walks them again and
# again: 0.3 s of a quiet `lifecycle run --once` at 1,778 racks. Cycles are still collected.
GC_THRESHOLDS = (100_000, 50, 100)


def main() -> None:
    noun = invoked_noun(sys.argv[1:])
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        tree = build_app(None if noun is None else [noun])
        gc.freeze()  # what the imports made lives as long as the process: never walked again
        tree()
    except Exception as err:
        # A bug, not bad input (that is a UserError, exit 2). Its traceback quotes the values
        # it failed on, a URL's token or an echoed header among them: it is printed through
        # the one redaction (no local variables), and the command exits 1.
        from rackscale.redact import redacted_traceback

        sys.stderr.write(redacted_traceback(err))
        sys.stderr.write("rackscale stopped on an internal error (above); please report it\n")
        sys.exit(1)
