"""A real Prometheus server (Debian `prometheus`) scrapes /metrics; PromQL agrees with the API."""

from __future__ import annotations

import time
from pathlib import Path

from .conftest import Server, prometheus


def test_prometheus_scrape_matches_the_api(server: Server, tmp_path: Path) -> None:
    with prometheus([server], tmp_path) as prom:
        deadline, total = time.monotonic() + 30, []
        while time.monotonic() < deadline and not total:
            total = prom.query("sum(rackscale_gpus)")
            time.sleep(0.0 if total else 0.5)
        summary = server.get("/api/v1/summary")[1]
        assert float(total[0]["value"][1]) == summary["gpus"] == 504
        by_state = {r["metric"]["state"]: float(r["value"][1])
                    for r in prom.query("sum by (state) (rackscale_gpus)")}
        assert by_state == {k: float(v) for k, v in summary["gpus_by_state"].items()}
        steps = prom.query("rackscale_usable_gpus")
        assert {r["metric"]["step"] for r in steps} >= {"headline", "healthy", "certified"}
        assert prom.query("rackscale_lifecycle_transitions_total > 0")
