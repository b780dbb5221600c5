"""RedfishPowerDriver against the real sushy-tools emulator (`sushy-emulator --fake`) over HTTP
on loopback: interlocked, sequenced power-up, idempotent passes, leak shut-down."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_rig import SimClock
from lc_slurm_cluster import free_port

from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, Topology
from rackscale.lifecycle import (
    Controller,
    RedfishPowerDriver,
    SimCoolingDriver,
    SimPlant,
    power_targets,
    set_goal,
    state_of,
)
from rackscale.store import Store, load_topology

SPEC = FleetSpec(name="redfish-lab", regions=[RegionSpec(
    name="lab", racks=[RackGroup(template="hgx-h100", count=1, nodes_per_rack=2)])])


# sushy-tools' fake driver applies each power action 1-11 s after the request (a random
# draw). The tests check that rackscale waits for the BMC's reported state, not the delay's
# size, and a power-up sequence waits for one delay per shelf and tray: draw the shortest one
# (the action still lands up to a second later, asynchronously) so the suite does not spend
# ~90 s sleeping. Everything else is the unmodified emulator.
_SHORT_DELAY = """
import sys
from sushy_tools.emulator.main import main
from sushy_tools.emulator.resources.systems import fakedriver

class _Shortest:
    @staticmethod
    def randint(low, high):
        return low

fakedriver.random = _Shortest
sys.exit(main())
"""


def _emulator() -> list[str]:
    exe = shutil.which("sushy-emulator") or str(Path(sys.executable).with_name("sushy-emulator"))
    if not Path(exe).exists():
        pytest.fail("sushy-tools is not installed; `make test` installs it (test extra)")
    return [sys.executable, "-c", _SHORT_DELAY]


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("sushy")
    topo = Topology.build(SPEC)
    shelves, trays = next(iter(power_targets(topo).values()))
    systems = [{"uuid": str(uuid.uuid4()), "name": t.replace("/", "-"), "power_state": "Off",
                "nics": [{"mac": f"00:5c:52:31:3a:{i:02x}", "ip": f"172.22.0.{100 + i}"}]}
               for i, t in enumerate([*shelves, *trays])]
    conf = d / "sushy.conf"
    conf.write_text(f"SUSHY_EMULATOR_STATE_DIR = {str(d / 'state')!r}\n"
                    f"SUSHY_EMULATOR_FAKE_SYSTEMS = {json.dumps(systems)}\n")
    port = free_port()
    proc = subprocess.Popen([*_emulator(), "--fake", "--config", str(conf), "-i", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sushy.log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "/redfish/v1/Systems", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                raise RuntimeError((d / "sushy.log").read_text()[-2000:]) from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


class Recording(RedfishPowerDriver):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.commands: list[tuple[str, bool, dict[str, bool]]] = []

    def set_power(self, target: str, on: bool) -> None:
        self.commands.append((target, on, self.observe()))
        super().set_power(target, on)


def _until(cond, timeout: float, ctl: Controller) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "BMC did not converge in time"
        ctl.reconcile()
        time.sleep(0.2)  # the BMC applies resets asynchronously; poll its reported state


def test_redfish_sequenced_power_up_and_leak_shutdown(bmc: str, tmp_path: Path) -> None:
    topo = Topology.build(SPEC)
    store = Store(f"sqlite:///{tmp_path / 'rf.db'}")
    load_topology(store, topo)
    clock = SimClock()
    plant = SimPlant.for_topology(topo, clock=clock)
    power = Recording(bmc)
    ctl = Controller(store, topo, power, SimCoolingDriver(plant), clock=clock)
    ctl.enroll()
    rack = topo.racks[0].id
    shelves, trays = ctl.targets[rack]

    plant.set_flow(rack, 1.0)  # interlock: no flow, no power
    set_goal(store, [rack], "powered")
    for _ in range(5):
        ctl.reconcile()
    assert state_of(store, rack).state == "cabled"
    assert power.commands == []

    plant.set_flow(rack, None)
    _until(lambda: state_of(store, rack).state == "powered", 90, ctl)
    on_cmds = [(t, obs) for t, on, obs in power.commands if on]
    assert [t for t, _ in on_cmds[:2]] == shelves  # ps1 then ps2 ...
    assert on_cmds[1][1][shelves[0]] is True  # ... and ps2 only once ps1 reported On
    assert all(power.observe()[t] for t in (*shelves, *trays)) or trays
    _until(lambda: all(power.observe().values()), 60, ctl)

    n = len(power.commands)
    assert not ctl.reconcile().commands and len(power.commands) == n  # idempotent pass

    plant.set_leak(rack, {trays[0]}, critical=True)
    ctl.reconcile()
    assert state_of(store, rack).state == "isolated"
    assert not plant.valve_open[rack]
    _until(lambda: not any(power.observe().values()), 60, ctl)
    events = store.events(component_id=rack, kind="lifecycle.interlock")
    assert events[-1].payload["rule"] == "leak_critical"


def test_a_silent_or_non_redfish_endpoint_is_a_driver_error() -> None:
    """A BMC that accepts the connection but never answers (read timeout) or a web server
    that is not Redfish must surface as DriverError (the controller rolls the rack back),
    not as a traceback that stops the loop."""
    import http.server
    import socket
    import threading

    from rackscale.lifecycle import DriverError, RedfishPowerDriver

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # the kernel completes the handshake; nobody ever answers
    try:
        drv = RedfishPowerDriver(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout_s=0.5)
        with pytest.raises(DriverError, match=r"no answer within 0\.5 s"):
            drv.observe()
    finally:
        silent.close()

    class Html(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>not redfish</html>")

        def log_message(self, *_a: object) -> None:
            return None

    srv = http.server.HTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        drv = RedfishPowerDriver(f"http://127.0.0.1:{srv.server_port}", timeout_s=5)
        with pytest.raises(DriverError, match="not JSON"):
            drv.observe()
    finally:
        srv.shutdown()
        srv.server_close()
