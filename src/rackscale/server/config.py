"""The server's typed config and its bearer token (read from a file or the environment only)."""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from rackscale.errors import UserError

TOKEN_ENV = "RACKSCALE_SERVER_TOKEN"
MIN_TOKEN_CHARS = 16
# Requests carry a drain reason at most; anything bigger is refused before it is read.
DEFAULT_MAX_BODY_BYTES = 16 * 1024
# Live streams (each an open connection and a poll loop): in all, per client address, and how
# long one may send nothing but keepalives before it ends (the dashboard reconnects).
DEFAULT_MAX_STREAMS = 256
DEFAULT_MAX_STREAMS_PER_CLIENT = 8
DEFAULT_STREAM_IDLE_S = 120.0


class ServerConfigError(UserError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(kw_only=True, slots=True)
class ServerConfig:
    """What `rackscale serve` runs with. The token is kept out of repr so it is never logged."""

    db: str | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    allow_remote: bool = False
    token: str | None = field(default=None, repr=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    poll_s: float = 2.0  # how often an open dashboard asks whether anything changed
    checkpoints: str | None = None  # a checkpoint tiers config (YAML/JSON) to list
    max_streams: int = DEFAULT_MAX_STREAMS
    max_streams_per_client: int = DEFAULT_MAX_STREAMS_PER_CLIENT
    stream_idle_s: float = DEFAULT_STREAM_IDLE_S
    # dcgm-exporter pages (URLs or files) the server scrapes beside its API, as `telemetry
    # watch` does; none: no watch
    dcgm: tuple[str, ...] = ()
    dcgm_every_s: float = 30.0
    dcgm_hosts: str | None = None  # Hostname -> tray id map, as `telemetry scrape --hosts`

    def __post_init__(self) -> None:
        if not 0 <= self.port < 65536:
            raise ServerConfigError(f"--port {self.port}: give a TCP port 1-65535 (0 picks a "
                                    "free one)")
        if not is_loopback(self.host):
            if not self.allow_remote:
                raise ServerConfigError(
                    f"--host {self.host} is not a loopback address: the API and dashboard "
                    "would be reachable from the network. Add --allow-remote (and a token via "
                    f"--token-file or ${TOKEN_ENV}) to bind it on purpose")
            if self.token is None:
                raise ServerConfigError(
                    f"--host {self.host} with --allow-remote needs a token: put one in a file "
                    f"(--token-file PATH) or in ${TOKEN_ENV}")
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise ServerConfigError(f"the server token has {len(self.token)} characters; use "
                                    f"at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)")
        if not 1024 <= self.max_body_bytes <= 1024 * 1024:
            raise ServerConfigError("max_body_bytes: give 1024..1048576")
        if not 0.2 <= self.poll_s <= 60:
            raise ServerConfigError("poll_s: give 0.2..60 seconds")
        if not 1 <= self.max_streams <= 100_000:
            raise ServerConfigError(f"--max-streams {self.max_streams}: give 1..100000")
        if not 1 <= self.max_streams_per_client <= self.max_streams:
            raise ServerConfigError(f"--max-streams-per-client {self.max_streams_per_client}: "
                                    f"give 1..--max-streams ({self.max_streams})")
        if not 1 <= self.dcgm_every_s <= 86400:  # NaN fails this too
            raise ServerConfigError(f"--dcgm-every {self.dcgm_every_s:g}: give 1..86400 "
                                    "seconds")
        if self.dcgm_hosts is not None and not self.dcgm:
            raise ServerConfigError("--dcgm-hosts maps exporter host names: give --dcgm too")
        if not 1 <= self.stream_idle_s <= 3600:  # NaN fails this too
            raise ServerConfigError(f"--stream-idle-s {self.stream_idle_s:g}: give 1..3600 "
                                    "seconds")


def read_token(token_file: str | None) -> str | None:
    """The token from `token_file` (first line, stripped), else from $RACKSCALE_SERVER_TOKEN,
    else None. A file others can read is refused: it would hand mutations to any local user."""
    if token_file is not None:
        path = Path(token_file)
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise ServerConfigError(f"--token-file {token_file}: {err.strerror}; give a "
                                    "readable file holding the token") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ServerConfigError(f"--token-file {token_file} can be read by other users "
                                    f"(mode {stat.S_IMODE(mode):o}); run `chmod 600 "
                                    f"{token_file}`")
        token = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not token:
            raise ServerConfigError(f"--token-file {token_file} is empty; write the token "
                                    "on its first line")
        return token
    env = os.environ.get(TOKEN_ENV)
    if env is not None:
        if not env.strip():
            raise ServerConfigError(f"${TOKEN_ENV} is set but empty; unset it or give a "
                                    "token")
        return env.strip()
    return None
