"""A PowerDriver that speaks Redfish over real HTTP to BMCs.

Each power target (a shelf `us-east/r01/ps1`, a tray `us-east/r01/c07`) is one Redfish
ComputerSystem whose `Name` is the target id with `/` replaced by `-` (the same mapping as
Slurm node names). Power on/off is `POST .../Actions/ComputerSystem.Reset` with ResetType
`On` / `ForceOff`; the BMC applies it asynchronously, so `observe()` reads `PowerState` back.
Power caps go to the chassis `Power` resource (`PowerControl[0].PowerLimit.LimitInWatts`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from rackscale.lifecycle.drivers import DriverError


class RedfishPowerDriver:
    def __init__(self, base_url: str, *, timeout_s: float = 10.0,
                 rack_power_w: dict[str, float] | None = None) -> None:
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.rack_power_w = rack_power_w or {}
        self._caps: dict[str, float] = {}
        self._systems: dict[str, str] | None = None  # target id -> system path

    def _req(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as err:
            raise DriverError(f"Redfish {method} {self.base}{path}: HTTP {err.code} "
                              f"{err.read()[:200]!r}") from None
        except urllib.error.URLError as err:
            raise DriverError(f"Redfish BMC at {self.base} unreachable: {err.reason}") from None
        except OSError as err:  # a read timeout or a dropped connection is not a URLError
            raise DriverError(f"Redfish {method} {self.base}{path}: no answer within "
                              f"{self.timeout_s:g} s ({err or type(err).__name__}); check "
                              "the BMC") from None
        try:
            return json.loads(raw) if raw else None
        except json.JSONDecodeError:
            raise DriverError(f"Redfish {method} {self.base}{path}: the answer is not JSON "
                              f"({raw[:80]!r}); is --redfish the BMC's base URL?") from None

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
        name = target.replace("/", "-")
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
        return self._req("GET", self._path(target)).get("PowerState") == "On"

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
