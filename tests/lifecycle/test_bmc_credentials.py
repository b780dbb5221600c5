"""BMC credentials come from a file or the environment, never the URL, and show in no message.

Runs against the real sushy-tools emulator with HTTP Basic authentication switched on
(`SUSHY_EMULATOR_AUTH_FILE`, an htpasswd file with a bcrypt hash).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from lc_slurm_cluster import free_port
from test_lifecycle_redfish import _emulator

from rackscale.lifecycle import RedfishPowerDriver
from rackscale.lifecycle.drivers import DriverError
from rackscale.lifecycle.redfish import (
    BMC_CREDENTIALS_ENV,
    BMC_PASSWORD_ENV,
    BMC_USER_ENV,
    BmcCredentials,
    bmc_credentials,
)

USER, PASSWORD = "admin", "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def bmc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d = tmp_path_factory.mktemp("sushy-auth")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (d / "htpasswd").write_text(f"{USER}:{hashed}\n")
    systems = [{"uuid": str(uuid.uuid4()), "name": "lab-r01-ps1", "power_state": "Off"}]
    conf = d / "sushy.conf"
    conf.write_text(f"SUSHY_EMULATOR_STATE_DIR = {str(d / 'state')!r}\n"
                    f"SUSHY_EMULATOR_FAKE_SYSTEMS = {json.dumps(systems)}\n"
                    f"SUSHY_EMULATOR_AUTH_FILE = {str(d / 'htpasswd')!r}\n")
    port = free_port()
    proc = subprocess.Popen([*_emulator(), "--fake", "--config", str(conf), "-i", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sushy.log", "w"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "/redfish/v1/", timeout=2).close()
            break
        except urllib.error.HTTPError:
            break  # 401: it is up and asks for credentials
        except OSError:
            if time.monotonic() > end or proc.poll() is not None:
                proc.kill()
                raise RuntimeError((d / "sushy.log").read_text()[-2000:]) from None
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_credentials_in_the_url_are_refused_without_echo(bmc: str) -> None:
    url = bmc.replace("http://", f"http://{USER}:{PASSWORD}@")
    with pytest.raises(DriverError) as err:
        RedfishPowerDriver(url, credentials=BmcCredentials(USER, PASSWORD))
    msg = str(err.value)
    assert PASSWORD not in msg and BMC_CREDENTIALS_ENV in msg and BMC_USER_ENV in msg


def test_no_credentials_says_where_to_put_them(bmc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (BMC_CREDENTIALS_ENV, BMC_USER_ENV, BMC_PASSWORD_ENV):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(DriverError, match=r"HTTP 401.*needs credentials.*RACKSCALE_BMC"):
        RedfishPowerDriver(bmc).systems()


def test_credentials_from_a_file_work(bmc: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "bmc.cred"
    f.write_text(f"{USER}:{PASSWORD}\n")
    monkeypatch.setenv(BMC_CREDENTIALS_ENV, str(f))
    creds = bmc_credentials()
    assert creds is not None and PASSWORD not in repr(creds)
    drv = RedfishPowerDriver(bmc)
    assert list(drv.systems()) == ["lab-r01-ps1"]
    drv.set_power("lab/r01/ps1", True)  # an authenticated POST the BMC accepts
    # the emulator applies a reset asynchronously (see _emulator); the bound covers its
    # unshortened 1-11 s too, and a loaded machine
    end = time.monotonic() + 25
    while not drv.power_state("lab/r01/ps1") and time.monotonic() < end:
        time.sleep(0.1)
    assert drv.power_state("lab/r01/ps1") is True


def test_wrong_password_from_env_is_refused_without_echo(
        bmc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BMC_CREDENTIALS_ENV, raising=False)
    monkeypatch.setenv(BMC_USER_ENV, USER)
    monkeypatch.setenv(BMC_PASSWORD_ENV, "wrong-guess-77")
    with pytest.raises(DriverError) as err:
        RedfishPowerDriver(bmc).systems()
    assert "refused" in str(err.value) and "wrong-guess-77" not in str(err.value)


def test_cli_refuses_url_credentials_and_masks_them(bmc: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/r.db"
    env = dict(os.environ)
    load = subprocess.run([sys.executable, "-m", "rackscale", "fleet", "load", "--fleet",
                           "seed-504", "--db", db], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)
    assert load.returncode == 0, load.stderr
    url = bmc.replace("http://", f"http://{USER}:{PASSWORD}@")
    res = subprocess.run([sys.executable, "-m", "rackscale", "lifecycle", "run", "--once",
                          "--db", db, "--redfish", url], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 2, res.stderr
    assert PASSWORD not in res.stdout + res.stderr
    assert "credentials do not go in the URL" in res.stderr and "Traceback" not in res.stderr
