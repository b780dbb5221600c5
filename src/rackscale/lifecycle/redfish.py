"""A PowerDriver that speaks Redfish over real HTTP to BMCs.

Each power target (a shelf `us-east/r01/ps1`, a tray `us-east/r01/c07`) is one Redfish
ComputerSystem whose `Name` is the target id with `/` replaced by `-` (the same mapping as
Slurm node names). Power on/off is `POST .../Actions/ComputerSystem.Reset` with ResetType
`On` / `ForceOff`; the BMC applies it asynchronously, so `observe()` reads `PowerState` back.
Power caps go to the chassis `Power` resource (`PowerControl[0].PowerLimit.LimitInWatts`).

BMC credentials never travel in the URL or on the command line (where `ps` and shell history
show them): they come from a file named by $RACKSCALE_BMC_CREDENTIALS (one line
`user:password`) or from $RACKSCALE_BMC_USER and $RACKSCALE_BMC_PASSWORD, go out as HTTP Basic
authentication, and appear in no message.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rackscale.fleet import slurm_node_name
from rackscale.inputs import read_text
from rackscale.lifecycle.drivers import DriverError
from rackscale.redact import redact, redact_url

BMC_CREDENTIALS_ENV = "RACKSCALE_BMC_CREDENTIALS"
BMC_USER_ENV = "RACKSCALE_BMC_USER"
BMC_PASSWORD_ENV = "RACKSCALE_BMC_PASSWORD"
WHERE_CREDENTIALS = (f"put `user:password` in a file named by ${BMC_CREDENTIALS_ENV}, or set "
                     f"${BMC_USER_ENV} and ${BMC_PASSWORD_ENV}")


@dataclass(frozen=True, slots=True)
class BmcCredentials:
    user: str
    password: str = field(repr=False)

    def header(self) -> str:
        token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        return f"Basic {token}"


def bmc_credentials(environ: Mapping[str, str] | None = None) -> BmcCredentials | None:
    """The BMC credentials from the environment (file first), or None when none are set."""
    env = os.environ if environ is None else environ
    user: str | None
    password: str | None
    path = env.get(BMC_CREDENTIALS_ENV)
    if path:
        text = read_text(path, "BMC credentials", max_bytes=4096, error=DriverError).strip()
        user, sep, password = text.partition(":")
        if not sep or not user or "\n" in text:
            raise DriverError(f"{path} (${BMC_CREDENTIALS_ENV}): write one line "
                              "`user:password`")
        return BmcCredentials(user, password)
    user, password = env.get(BMC_USER_ENV), env.get(BMC_PASSWORD_ENV)
    if user or password:
        if not (user and password is not None):
            raise DriverError(f"set both ${BMC_USER_ENV} and ${BMC_PASSWORD_ENV} (or use "
                              f"${BMC_CREDENTIALS_ENV})")
        return BmcCredentials(user, password)
    return None


def _base_url(url: str) -> str:
    """The BMC base URL, refused when it carries credentials (they would leak into `ps`,
    shell history and every log line that names the BMC)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise DriverError(f"--redfish {_masked(url)!r}: give the BMC's base URL, "
                          "http(s)://HOST[:PORT]")
    if parts.username is not None or parts.password is not None:
        raise DriverError(f"--redfish {_masked(url)!r}: credentials do not go in the URL; "
                          f"{WHERE_CREDENTIALS}")
    return url.rstrip("/")


def _masked(url: str) -> str:
    return redact_url(url, keep_user=False)


class RedfishPowerDriver:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 rack_power_w: dict[str, float] | None = None,
                 credentials: BmcCredentials | None = None) -> None:
        self.base = _base_url(base_url)
        self._credentials = credentials if credentials is not None else bmc_credentials()
        self.timeout_s = timeout_s
        self.rack_power_w = rack_power_w or {}
        self._caps: dict[str, float] = {}
        self._systems: dict[str, str] | None = None  # target id -> system path

    def _req(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._credentials is not None:
            headers["Authorization"] = self._credentials.header()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            if err.code in (401, 403):
                given = ("the credentials were refused" if self._credentials
                         else "it needs credentials")
                raise DriverError(f"Redfish {method} {self.base}{path}: HTTP {err.code}, "
                                  f"{given}; {WHERE_CREDENTIALS}") from None
            # A BMC's error body may echo the request, Authorization header included: it is
            # shown only through the redaction, which also knows our own password.
            raise DriverError(f"Redfish {method} {self.base}{path}: HTTP {err.code} "
                              f"{self._shown(err.read()[:200])}") from None
        except urllib.error.URLError as err:
            raise DriverError(f"Redfish BMC at {self.base} unreachable: "
                              f"{self._redact(str(err.reason))}") from None
        except OSError as err:  # a read timeout or a dropped connection is not a URLError
            raise DriverError(f"Redfish {method} {self.base}{path}: no answer within "
                              f"{self.timeout_s:g} s ({err or type(err).__name__}); check "
                              "the BMC") from None
        try:
            return json.loads(raw) if raw else None
        except json.JSONDecodeError:
            raise DriverError(f"Redfish {method} {self.base}{path}: the answer is not JSON "
                              f"({self._shown(raw[:80])}); is --redfish the BMC's base "
                              "URL?") from None

    def _shown(self, body: bytes) -> str:
        """A BMC's answer as a message shows it: redacted as the text it is, then quoted (a
        repr first would double every escape and hide a JSON-escaped echo from the redaction)."""
        return repr(self._redact(body.decode("utf-8", "replace")))

    def _redact(self, text: str) -> str:
        c = self._credentials
        known = [] if c is None else [c.password, c.header().split(" ", 1)[1]]
        return redact(text, secrets=known)

    def systems(self) -> dict[str, str]:
        if self._systems is None:
            found: dict[str, str] = {}
            for m in self._req("GET", "/redfish/v1/Systems")["Members"]:
                path = m["@odata.id"]
                name = self._req("GET", path)["Name"]
                found[name] = path
            self._systems = found
        return self._systems

    def _path(self, target: str) -> str:
        name = slurm_node_name(target)  # a BMC's system is named as its Slurm node
        systems = self.systems()
        if name not in systems:
            raise DriverError(f"no Redfish system named {name!r} (for {target}) at {self.base}; "
                              f"systems: {', '.join(sorted(systems))}")
        return systems[name]

    def observe(self) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for name, path in self.systems().items():
            out[_target(name)] = self._req("GET", path).get("PowerState") == "On"
        return out

    def power_state(self, target: str) -> bool:
        power: object = self._req("GET", self._path(target)).get("PowerState")
        return power == "On"

    def set_power(self, target: str, on: bool) -> None:
        self._req("POST", self._path(target) + "/Actions/ComputerSystem.Reset",
                  {"ResetType": "On" if on else "ForceOff"})

    def caps(self) -> dict[str, float]:
        return dict(self._caps)

    def set_cap(self, rack: str, fraction: float | None) -> None:
        watts = None if fraction is None else self.rack_power_w.get(rack, 0.0) * fraction
        self._req("PATCH", f"/redfish/v1/Chassis/{rack.replace('/', '-')}/Power",
                  {"PowerControl": [{"PowerLimit": {"LimitInWatts": watts}}]})
        if fraction is None:
            self._caps.pop(rack, None)
        else:
            self._caps[rack] = fraction


def _target(name: str) -> str:
    # region names may hold '-', so split from the right: region-rack-part
    parts = name.rsplit("-", 2)
    return "/".join(parts) if len(parts) == 3 else name
