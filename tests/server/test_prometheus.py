"""A real Prometheus server (Debian `prometheus`) scrapes /metrics; PromQL agrees with the API."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

from ..conftest import free_port
from .conftest import Server, request

PROMETHEUS = shutil.which("prometheus")
pytestmark = pytest.mark.skipif(PROMETHEUS is None,
                                reason="Debian prometheus missing (scripts/bootstrap.sh test)")


def _query(base: str, promql: str) -> list[dict]:
    status, body = request(f"{base}/api/v1/query?query={urllib.parse.quote(promql)}")
    assert status == 200 and body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrape_matches_the_api(server: Server, tmp_path: Path) -> None:
    target = server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "rackscale", "static_configs": [
            {"targets": [target]}]}]}))
    port = free_port()
    assert PROMETHEUS is not None
    with open(tmp_path / "prom.log", "wb") as log:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--web.listen-address=127.0.0.1:{port}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
            stdout=subprocess.DEVNULL, stderr=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline, got = time.monotonic() + 60, []
        while time.monotonic() < deadline and not got:
            assert proc.poll() is None, (tmp_path / "prom.log").read_text()[-2000:]
            with contextlib.suppress(OSError):  # not listening yet
                got = _query(base, 'up{job="rackscale"} == 1')
            if not got:
                time.sleep(0.5)
        assert got, "Prometheus never scraped rackscale serve"
        deadline, total = time.monotonic() + 30, []
        while time.monotonic() < deadline and not total:
            total = _query(base, "sum(rackscale_gpus)")
            time.sleep(0.0 if total else 0.5)
        summary = server.get("/api/v1/summary")[1]
        assert float(total[0]["value"][1]) == summary["gpus"] == 504
        by_state = {r["metric"]["state"]: float(r["value"][1])
                    for r in _query(base, "sum by (state) (rackscale_gpus)")}
        assert by_state == {k: float(v) for k, v in summary["gpus_by_state"].items()}
        steps = _query(base, "rackscale_usable_gpus")
        assert {r["metric"]["step"] for r in steps} >= {"headline", "healthy", "certified"}
        assert _query(base, "rackscale_lifecycle_transitions_total > 0")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
