"""Helpers of the lab tests: what exists on the host (to compare before and after), and the
lab's CLI run as a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from rackscale.lab import default_fleet_path, why_not_here

ROOT = Path(__file__).resolve().parents[2]
FLEET = default_fleet_path()


def lab_unavailable() -> str | None:
    return why_not_here()


def torch_missing() -> str | None:
    try:
        import torch  # noqa: F401
    except ImportError:
        return "torch is not installed (pip install 'rackscale[torch]')"
    return None


def host_snapshot() -> dict[str, set[str]]:
    """Network namespaces, host links, qdiscs and cgroup directories that exist now."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                           check=True)
    addrs = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True,
                           check=True)
    cgroups: set[str] = set()
    for top in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu"), Path("/sys/fs/cgroup/pids")):
        if top.is_dir():
            cgroups |= {str(p) for p in top.iterdir() if p.is_dir()}
    return {
        "netns": {line.split()[0] for line in ns.stdout.splitlines() if line.strip()},
        "links": {line.split(":")[1].strip() for line in links.stdout.splitlines()},
        "addrs": {" ".join(line.split()[1:4]) for line in addrs.stdout.splitlines()},
        "cgroups": cgroups,
    }


def left_behind(before: dict[str, set[str]], after: dict[str, set[str]],
                lab_id: str | None) -> dict[str, set[str]]:
    """What changed on the host between two snapshots, other labs' namespaces and cgroups
    left out (on a shared machine other labs come and go; in CI none runs beside): {} when a
    lab `lab_id` left nothing behind and removed nothing it did not create."""
    def other_lab(x: str) -> bool:
        return (("rsl-" in x and f"rsl-{lab_id}-" not in x)
                or ("rackscale-lab-" in x and f"rackscale-lab-{lab_id}" not in x))
    out = {k: {x for x in after[k] ^ before[k] if not other_lab(x)} for k in after}
    return {k: v for k, v in out.items() if v}


def cli(*args: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-m", "rackscale", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, check=check, cwd=ROOT)


def runuser() -> str | None:
    return shutil.which("setpriv")
