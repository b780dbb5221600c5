"""What every CLI noun shares: consoles, JSON output, the database option, error handling."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from rackscale.errors import UserError

console = Console()
err_console = Console(stderr=True)

DbOption = typer.Option(
    None, "--db", metavar="URL", help="Database URL (default: $RACKSCALE_DB or sqlite:///rackscale-data/"
    "rackscale.db; PostgreSQL: postgresql+psycopg://user@host/db).", show_default=False,
)
JsonOption = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
# The option names every command shares are listed, one concept per name, in docs/cli.md
# (tests/cli/test_option_names.py holds every command to that table).
FleetOption = typer.Option(
    None, "--fleet", metavar="SPEC", show_default=False,
    help="Fleet spec YAML file, or the name of a built-in fleet (seed-504). Default: the "
    "fleet loaded in the store (--db).")


def seed_option(default: int, what: str) -> Any:
    """`--seed N`: the random seed of `what` (same seed, same run)."""
    return typer.Option(default, "--seed", help=f"Random seed of {what} (same seed, same "
                        "result).")


def out_dir_option(default: str, what: str) -> Any:
    """`--out DIR`: the directory a command writes its files into (created when missing)."""
    return typer.Option(default, "--out", metavar="DIR", help=f"Directory to write {what} "
                        "into (created when missing).")


def emit_json(obj: Any) -> None:
    """JSON on stdout, never through Rich (which would wrap lines and add markup)."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


class RackscaleGroup(TyperGroup):
    """Root command group: a UserError anywhere below becomes a message and exit code 2."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UserError as err:
            err_console.print(f"[bold red]error:[/] {escape(str(err))}", highlight=False,
                              soft_wrap=True)
            raise typer.Exit(err.exit_code) from None


def noun(help_text: str) -> typer.Typer:
    """A sub-command group (a noun of the tree) with the project's defaults."""
    return typer.Typer(help=help_text, no_args_is_help=True, add_completion=False)
