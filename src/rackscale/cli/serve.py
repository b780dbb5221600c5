"""`rackscale serve`: the HTTP API, live dashboard and Prometheus metrics over a store."""

from __future__ import annotations

import typer

from rackscale.cli._common import DbOption
from rackscale.errors import UserError
from rackscale.server import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_STREAMS_PER_CLIENT,
    DEFAULT_STREAM_IDLE_S,
    TOKEN_ENV,
    ServerConfig,
    read_token,
)

MaxStreamsOpt = typer.Option(DEFAULT_MAX_STREAMS, "--max-streams", metavar="INT",
                             help="Live streams open at once, in all (503 past it).")
PerClientOpt = typer.Option(DEFAULT_MAX_STREAMS_PER_CLIENT, "--max-streams-per-client",
                            metavar="INT", help="Live streams one client address may hold "
                            "(429 past it).")
IdleOpt = typer.Option(DEFAULT_STREAM_IDLE_S, "--stream-idle-s", metavar="SECONDS",
                       help="End a live stream after this long without a change (the "
                       "dashboard reconnects).")


def serve(
    db: str | None = DbOption,
    host: str = typer.Option("127.0.0.1", "--host", metavar="ADDR",
                             help="Address to bind (loopback unless --allow-remote)."),
    port: int = typer.Option(8080, "--port", min=0, max=65535, help="TCP port to listen on."),
    allow_remote: bool = typer.Option(False, "--allow-remote",
                                      help="Allow a non-loopback --host (needs a token)."),
    token_file: str | None = typer.Option(
        None, "--token-file", metavar="FILE", show_default=False,
        help=f"File whose first line is the bearer token for mutations (or set ${TOKEN_ENV})."),
    checkpoints: str | None = typer.Option(
        None, "--config", metavar="FILE", show_default=False,
        help="Checkpoint tiers config (YAML/JSON, as `checkpoint ls --config`) whose "
        "checkpoints /api/v1/checkpoints and /metrics list."),
    token: str | None = typer.Option(None, "--token", hidden=True, show_default=False,
                                     metavar="TEXT", help="Refused: see --token-file."),
    max_streams: int = MaxStreamsOpt, max_streams_per_client: int = PerClientOpt,
    stream_idle_s: float = IdleOpt,
    dcgm: list[str] = typer.Option([], "--dcgm", metavar="URL|FILE", show_default=False,
                                   help="A dcgm-exporter page to scrape beside the API, as "
                                   "`telemetry watch` does (repeat for several; /api/v1/"
                                   "telemetry shows the last scrape)."),
    dcgm_every: float = typer.Option(30.0, "--dcgm-every", metavar="S", min=1.0,
                                     max=86400.0, help="Seconds between scrapes of --dcgm."),
    dcgm_hosts: str | None = typer.Option(None, "--dcgm-hosts", metavar="FILE",
                                          show_default=False, help="YAML map of exporter "
                                          "Hostname -> tray id (as `telemetry scrape --hosts`)."),
) -> None:
    """Serve the API (/api/v1), the live dashboard (/) and Prometheus metrics (/metrics)."""
    if token is not None:
        # argv is visible to every local user (ps, /proc) and lands in shell history.
        raise UserError("a token on the command line is refused (other users can read it in "
                        f"`ps`); put it in a file for --token-file (chmod 600) or in ${TOKEN_ENV}")
    try:
        from rackscale.server import serve as run_server
        cfg = ServerConfig(db=db, host=host, port=port, allow_remote=allow_remote,
                           token=read_token(token_file), checkpoints=checkpoints,
                           max_streams=max_streams, max_streams_per_client=max_streams_per_client,
                           stream_idle_s=stream_idle_s, dcgm=tuple(dcgm),
                           dcgm_every_s=dcgm_every, dcgm_hosts=dcgm_hosts)
        import fastapi  # noqa: F401  (checked here to name the extra, not fail in a traceback)
        import uvicorn  # noqa: F401
    except ModuleNotFoundError as err:
        raise UserError(f"`rackscale serve` needs {err.name}: pip install "
                        "'rackscale[server]'") from None
    run_server(cfg)
