"""The `rackscale` command: a Typer noun tree (`rackscale fleet|certify|lifecycle|...`).

Each noun lives in its own module here and is registered below; `demo` runs the main job.
"""

from __future__ import annotations

import sys

import typer

from rackscale import __version__
from rackscale.cli._common import RackscaleGroup
from rackscale.cli.certify import app as certify_app
from rackscale.cli.checkpoint import app as checkpoint_app
from rackscale.cli.demo import demo
from rackscale.cli.fleet import app as fleet_app
from rackscale.cli.job import app as job_app
from rackscale.cli.lab import app as lab_app
from rackscale.cli.lifecycle import app as lifecycle_app
from rackscale.cli.report import app as report_app
from rackscale.cli.serve import serve
from rackscale.cli.simulate import app as simulate_app
from rackscale.cli.statement import app as _statement_commands  # noqa: F401 (report keygen..)
from rackscale.cli.telemetry import app as telemetry_app

app = typer.Typer(
    cls=RackscaleGroup,
    name="rackscale",
    help="Operator software that makes many GPU racks behave as one machine.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(fleet_app, name="fleet")
app.add_typer(lifecycle_app, name="lifecycle")
app.add_typer(certify_app, name="certify")
app.add_typer(checkpoint_app, name="checkpoint")
app.add_typer(simulate_app, name="simulate")
app.add_typer(report_app, name="report")
app.add_typer(lab_app, name="lab")
app.add_typer(job_app, name="job")
app.add_typer(telemetry_app, name="telemetry")
app.command("serve")(serve)
app.command("demo")(demo)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rackscale {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Operator software that makes many GPU racks behave as one machine."""


def main() -> None:
    try:
        app()
    except Exception as err:
        # A bug, not bad input (that is a UserError, exit 2). Its traceback quotes the values
        # it failed on, a URL's token or an echoed header among them: it is printed through
        # the one redaction (no local variables), and the command exits 1.
        from rackscale.redact import redacted_traceback

        sys.stderr.write(redacted_traceback(err))
        sys.stderr.write("rackscale stopped on an internal error (above); please report it\n")
        sys.exit(1)
