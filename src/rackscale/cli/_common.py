"""What every CLI noun shares: consoles, JSON output, the database option, error handling."""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text
from typer._click.exceptions import UsageError  # typer vendors click; no public alias
from typer.core import TyperGroup

from rackscale.errors import UserError
from rackscale.inputs import shown
from rackscale.redact import redact

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
    help="Fleet spec YAML file, or the name of a built-in fleet (seed-504, lab). Default: the "
    "fleet loaded in the store (--db).")


def seed_option(default: int, what: str) -> Any:
    """`--seed N`: the random seed of `what` (same seed, same run)."""
    return typer.Option(default, "--seed", min=0, help=f"Random seed of {what} (same seed, "
                        "same result).")


def out_dir_option(default: str, what: str) -> Any:
    """`--out DIR`: the directory a command writes its files into (created when missing)."""
    return typer.Option(default, "--out", metavar="DIR", help=f"Directory to write {what} "
                        "into (created when missing).")


def json_safe(obj: Any) -> Any:
    """`obj` with every NaN/inf float replaced by None: JSON has no NaN, and a consumer's
    parser (jq, JavaScript, Go) rejects the bare `NaN` that Python writes by default."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def emit_json(obj: Any) -> None:
    """JSON on stdout, never through Rich (which would wrap lines and add markup); always
    valid JSON (no NaN)."""
    text = json.dumps(json_safe(obj), indent=2, sort_keys=False, default=str, allow_nan=False)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def visible(text: object) -> str:
    """`text` with every control character (ESC, OSC, NUL, CR ... but tab and newline) shown
    as `\\xNN`, and every bidi or zero-width one as `\\uNNNN`: text from a store or a file
    never drives the reader's terminal nor reorders what it reads."""
    return shown(str(text))


def plain(text: object) -> Text:
    """User text (names, reasons, ids) as a Rich cell or line that is never read as markup
    nor as a terminal sequence: a drain reason `[/]` or a name `[bold]` prints as written, an
    ESC in one as `\\x1b`."""
    return Text(visible(text))


def say(text: object, *, style: str | None = None) -> None:
    """Print user text on the console with markup, highlighting and control characters off."""
    console.print(visible(text), markup=False, highlight=False, style=style, soft_wrap=True)


def error_json(message: str, code: int, kind: str = "error") -> None:
    """The error object `--json` callers get on stdout (with the same exit code)."""
    emit_json({"error": {"kind": kind, "message": message, "exit_code": code}})


def _wants_json(ctx: Any) -> bool:
    args = [*getattr(ctx, "protected_args", []), *ctx.args]
    return "--json" in args


# Options renamed to one name per concept or to carry their unit: old spelling -> new. A
# command that has the new name still takes the old one: it is not shown by --help, and using it
# prints a note naming the new one (stderr). docs/cli.md lists them under "Old option names".
RENAMED_OPTIONS: dict[str, str] = {
    "--checkpoints": "--config",
    "--gpus": "--job-gpus",
    "--ckpt-interval": "--ckpt-interval-min",
    "--ckpt-cost": "--ckpt-cost-s",
    "--restart": "--restart-min",
    "--detect": "--detect-min",
    "--straggler-detect": "--straggler-detect-min",
    "--rack-repair": "--rack-repair-h",
    "--region-outage": "--region-outage-h",
    "--intervals": "--intervals-min",
    "--period": "--period-s",
    "--duration": "--duration-min",
}


def renamed_args(cmd: Any, args: list[str]) -> list[str]:
    """`args` of command `cmd` with each old option name (RENAMED_OPTIONS) that `cmd` has under
    its new name spelled the new way; values and everything after `--` stay as they are."""
    params = {name: p for p in cmd.params
              for name in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
    out: list[str] = []
    rest = iter(args)
    for token in rest:
        if token == "--":
            out += [token, *rest]
            break
        name, eq, value = token.partition("=")
        new = RENAMED_OPTIONS.get(name)
        if new is not None and new in params and name not in params:
            err_console.print(f"note: {name} is now {new} (the old name still works)",
                              markup=False, highlight=False)
            name, token = new, new + eq + value
        out.append(token)
        p = params.get(name)
        if (p is not None and p.param_type_name == "option" and not eq
                and not getattr(p, "is_flag", False) and not getattr(p, "count", False)):
            value_token = next(rest, None)  # the option's value, passed on as it is
            if value_token is not None:
                out.append(value_token)
    return out


class RenamingGroup(TyperGroup):
    """A command group whose commands still take their options' old names (renamed_args)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[Any, Any, list[str]]:
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and not isinstance(cmd, TyperGroup):
            rest = renamed_args(cmd, rest)
        return name, cmd, rest


class RackscaleGroup(RenamingGroup):
    """Root command group: a UserError anywhere below becomes a message and exit code 2.
    With `--json`, the message is also a JSON object on stdout, so a script always parses."""

    def invoke(self, ctx: Any) -> Any:
        as_json = _wants_json(ctx)
        try:
            return super().invoke(ctx)
        except UserError as err:
            _user_error(err, as_json)
        except (IsADirectoryError, NotADirectoryError, FileExistsError) as err:
            # A directory where a command's file should be (or a file where its directory
            # should be) in a data directory: the operator's filesystem, not a bug. Only with
            # the path the OS names; without one it stays a traceback.
            if err.filename is None:
                raise
            _user_error(PathInTheWay(path_in_the_way(err)), as_json)
        except UsageError as err:
            if as_json:
                error_json(err.format_message(), err.exit_code, "usage")
            raise


class PathInTheWay(UserError):
    """The filesystem holds the wrong kind of thing where a command reads or writes."""


def path_in_the_way(err: OSError) -> str:
    """The message for a directory where a file should be, or the reverse."""
    # A rename onto a directory (os.replace(tmp, dst)) names the directory second.
    path = os.fsdecode(err.filename2 if err.filename2 is not None else err.filename)
    if isinstance(err, IsADirectoryError):
        what = "is a directory where rackscale expects a file"
    elif isinstance(err, NotADirectoryError):
        what = "a part of this path is a file where rackscale expects a directory"
    else:
        what = "is in the way: rackscale expects a directory (or no file yet) there"
    return (f"{path}: {what}. The command stopped there; move it aside (e.g. `mv {path} "
            f"{path}.bad`) and run the command again")


def _user_error(err: UserError, as_json: bool) -> NoReturn:
    # The one redaction covers what a room forgot: a driver's message that quotes a URL with
    # its password, an echoed Authorization header.
    message = redact(str(err))
    if as_json:
        error_json(message, err.exit_code, type(err).__name__)
    err_console.print(f"[bold red]error:[/] {escape(visible(message))}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(err.exit_code) from None


def check_out_file(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """`path` can be written as a file: not a directory, its folder creatable and writable.
    Checked before a command does any work, so a bad --out wastes nothing."""
    p = Path(path)
    if p.is_dir():
        raise UserError(f"{option} {p}: is a directory; give a file path (e.g. {p}/out.json)")
    _check_writable_dir(p.parent if str(p.parent) else Path("."), option, p)
    if p.exists() and not os.access(p, os.W_OK):
        raise UserError(f"{option} {p}: the file is not writable; fix its permissions or "
                        "give another path")
    return p


def check_out_dir(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """`path` can hold output files: a directory (or creatable as one) that is writable."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserError(f"{option} {p}: is a file; give a directory")
    _check_writable_dir(p, option, p)
    return p


def _check_writable_dir(d: Path, option: str, target: Path) -> None:
    probe = d
    while not probe.exists():  # the nearest existing ancestor decides whether mkdir works
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise UserError(f"{option} {target}: {probe} is a file, so no directory can be made "
                        "there; give another path")
    try:
        # A real (anonymous, at once removed) file, not os.access: root passes every access
        # check, but not a read-only mount or /proc.
        with tempfile.TemporaryFile(dir=probe):
            pass
    except OSError as err:
        raise UserError(f"{option} {target}: cannot write in {probe} ({err.strerror}); give a "
                        "path you can write to") from None


def noun(help_text: str) -> typer.Typer:
    """A sub-command group (a noun of the tree) with the project's defaults."""
    return typer.Typer(cls=RenamingGroup, help=help_text, no_args_is_help=True,
                       add_completion=False)
