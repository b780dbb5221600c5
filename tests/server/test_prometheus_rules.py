"""deploy/prometheus: `promtool check rules` and `promtool test rules` (series in, alerts out)
pass, and every alert has a test where it fires and one where it stays silent.

promtool comes with Debian's `prometheus` package (scripts/bootstrap.sh test installs it): a
machine without it fails here, it does not skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from ..needs import require

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = DEPLOY / "rackscale.rules.yml"
TESTS = sorted((DEPLOY / "tests").glob("*.yml"))
PROMTOOL = shutil.which("promtool")


def _promtool(*args: str) -> str:
    require(None if PROMTOOL else "promtool (Debian package prometheus) is not installed")
    assert PROMTOOL is not None
    proc = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120,
                          cwd=DEPLOY)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [r for g in groups for r in g["rules"] if "alert" in r]


def test_promtool_check_rules() -> None:
    out = _promtool("check", "rules", str(RULES))
    assert "SUCCESS" in out and "WARNING" not in out, out


def test_promtool_test_rules() -> None:
    assert TESTS, "no rule tests under deploy/prometheus/tests"
    out = _promtool("test", "rules", *map(str, TESTS))
    assert out.count("SUCCESS") == len(TESTS), out


def test_every_alert_is_tested_firing_and_silent_and_says_what_to_do() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for t in case.get("alert_rule_test", []):
                (fired if t.get("exp_alerts") else silent).add(t["alertname"])
    names = [a["alert"] for a in _alerts()]
    assert len(names) == len(set(names)) >= 6
    assert set(names) == fired, f"untested firing: {set(names) - fired}"
    assert set(names) <= silent, f"no silent case: {set(names) - silent}"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text()
    # GitHub's anchor of a heading that is one word: the word, lower-cased.
    anchors = {m.lower() for m in re.findall(r"^#{2,4} `?(\w+)`?\s*$", docs, re.M)}
    for a in _alerts():
        assert a["labels"]["severity"] in {"critical", "warning"}, a["alert"]
        ann = a["annotations"]
        assert ann["summary"] and ann["description"], a["alert"]
        anchor = ann["runbook"].removeprefix("docs/server.md#")
        assert anchor in anchors, f"{a['alert']}: docs/server.md has no section #{anchor}"
        assert a["alert"] in docs, f"{a['alert']} is not in docs/server.md's alert list"
