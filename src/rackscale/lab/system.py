"""The lab's hands on the kernel: `ip`, `tc` and cgroup files. Every call names what failed.

cgroups: v2 when /sys/fs/cgroup is a unified hierarchy with the cpu controller (cpu.max,
pids.max), else v1 (cpu/cpu.cfs_quota_us, pids/pids.max), as on hosts with legacy mounts.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rackscale.errors import UserError

CGROUP_ROOT = Path("/sys/fs/cgroup")
# A short scheduler period (10 ms) keeps a quota-capped rank's GEMM rate steady over a
# fraction of a second; the default 100 ms would make it jump by whole periods.
CFS_PERIOD_US = 10_000


class LabSystemError(UserError):
    pass


def why_not_here() -> str | None:
    """None when this host can build a lab, else why not (root, ip, tc, cgroups)."""
    if os.geteuid() != 0:
        return ("the lab creates network namespaces, veths, bridges, tc qdiscs and cgroups, "
                "which needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN). Fix: run it as root, e.g. "
                "in a VM or CI container you own")
    for exe in ("ip", "tc"):
        if shutil.which(exe) is None:
            return f"`{exe}` (iproute2) is not installed. Fix: apt-get install -y iproute2"
    try:
        cgroups()
    except LabSystemError as err:
        return str(err)
    return None


def run(argv: list[str], *, input_text: str | None = None, check: bool = True,
        timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    try:
        p = subprocess.run(argv, input=input_text, capture_output=True, text=True,
                           timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise LabSystemError(f"`{' '.join(argv[:6])}` did not finish in {timeout:.0f} s") from None
    if check and p.returncode != 0:
        what = (input_text or "").strip().splitlines()
        raise LabSystemError(f"`{' '.join(argv)}` failed ({p.returncode}): "
                             f"{p.stderr.strip()[-600:]}"
                             + (f" [batch of {len(what)}, first: {what[0]}]" if what else ""))
    return p


def ip_batch(ns: str | None, commands: list[str]) -> None:
    if commands:
        run(["ip", *(["-n", ns] if ns else []), "-batch", "-"],
            input_text="\n".join(commands) + "\n")


def tc_batch(ns: str, commands: list[str]) -> None:
    if commands:
        run(["tc", "-n", ns, "-batch", "-"], input_text="\n".join(commands) + "\n")


def netns_list() -> set[str]:
    p = run(["ip", "netns", "list"])
    return {line.split()[0] for line in p.stdout.splitlines() if line.strip()}


def netns_pids(ns: str) -> list[int]:
    p = run(["ip", "netns", "pids", ns], check=False)
    return [int(x) for x in p.stdout.split() if x.isdigit()]


def links(ns: str) -> set[str]:
    p = run(["ip", "-n", ns, "-o", "link", "show"], check=False)
    out = set()
    for line in p.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            out.add(parts[1].strip().split("@")[0])
    return out


# Jumbo frames on every lab link, as on datacenter fabrics (9000-byte Ethernet; RoCE and IB
# use 4096): each frame costs the host's CPU a pass through up to four shaped veths and three
# bridges, and with 1500-byte frames a 4-rank ring through the spine reached only ~0.74 of
# its shaped rate on a loaded 2-core host (0.96 with 9000; a pair ~0.92 either way).
MTU = 9000


# Seconds of its rate each token bucket holds. A backlogged tbf sends what its tokens allow
# and sleeps on a timer until the next frame's tokens are there; tokens that arrive while the
# timer is late are kept only up to the bucket's size. On a VM whose idle vCPUs halt (a quiet
# host), that timer waits for the hypervisor to wake a vCPU, and with a 1 ms bucket (under
# three jumbo frames at 200 Mbit/s) every wake-up later than ~0.6 ms lost link time. Measured
# on a quiet host (load ~1.5): 1 ms buckets gave leaf rings a median 0.60 and spine rings 0.58
# of their rate (min 0.3), 10 ms buckets 0.98 and 0.95; under load (busy vCPUs never halt)
# both give ~0.96-0.99. 10 ms covers such wake-ups; the average rate stays the stated one
# (after a pause a link runs ahead by at most one bucket: 250 kB at 200 Mbit/s).
BUCKET_S = 0.010


def tbf(dev: str, mbit: float) -> str:
    """A tc batch line shaping `dev`'s egress to `mbit` (token bucket of BUCKET_S of its
    rate). The bucket holds at least two whole frames: a frame larger than the bucket is
    never sent."""
    rate = max(mbit, 0.01)
    burst = max(int(rate * 1e6 / 8 * BUCKET_S), 2 * (MTU + 64))
    return f"qdisc replace dev {dev} root tbf rate {rate:.3f}mbit burst {burst} latency 50ms"


# ------------------------------------------------------------------ cgroups
@dataclass(frozen=True, slots=True)
class Cgroups:
    """Where a lab's cgroups live: one directory per controller (v1) or one (v2)."""

    v2: bool
    cpu_dir: Path
    pids_dir: Path

    def dirs(self, name: str) -> list[Path]:
        if self.v2:
            return [self.cpu_dir / name]
        return [self.cpu_dir / name, self.pids_dir / name]


def cgroups() -> Cgroups:
    top = CGROUP_ROOT / "cgroup.controllers"
    if top.exists() and {"cpu", "pids"} <= set(top.read_text().split()):
        return Cgroups(True, CGROUP_ROOT, CGROUP_ROOT)
    cpu, pids = CGROUP_ROOT / "cpu", CGROUP_ROOT / "pids"
    if (cpu / "cpu.cfs_quota_us").exists() and (pids / "cgroup.procs").exists():
        return Cgroups(False, cpu, pids)
    raise LabSystemError("no usable cgroup hierarchy: need cgroup v2 with the cpu and pids "
                         "controllers, or v1 cpu and pids mounts under /sys/fs/cgroup")


def cg_make(cg: Cgroups, name: str) -> None:
    for d in cg.dirs(name):
        d.mkdir(parents=False, exist_ok=True)
    if cg.v2:
        sub = cg.cpu_dir / name / "cgroup.subtree_control"
        if "/" not in name:  # the lab's top directory hands cpu and pids to its ranks
            sub.write_text("+cpu +pids")


def cg_set_weight(cg: Cgroups, name: str, weight_x: int) -> None:
    """Give `name` the CPU weight of `weight_x` ordinary processes (v1 cpu.shares, v2
    cpu.weight): on a busy host its ranks still get the share their quota allows."""
    if cg.v2:
        (cg.cpu_dir / name / "cpu.weight").write_text(str(min(100 * weight_x, 10000)))
    else:
        (cg.cpu_dir / name / "cpu.shares").write_text(str(1024 * weight_x))


def cg_set_cpu(cg: Cgroups, name: str, cores: float) -> None:
    quota = max(int(cores * CFS_PERIOD_US), 1000)
    if cg.v2:
        (cg.cpu_dir / name / "cpu.max").write_text(f"{quota} {CFS_PERIOD_US}")
    else:
        (cg.cpu_dir / name / "cpu.cfs_period_us").write_text(str(CFS_PERIOD_US))
        (cg.cpu_dir / name / "cpu.cfs_quota_us").write_text(str(quota))


def cg_set_pids(cg: Cgroups, name: str, limit: int | None) -> None:
    (cg.pids_dir / name / "pids.max").write_text("max" if limit is None else str(limit))


def cg_procs(cg: Cgroups, name: str) -> list[int]:
    pids: set[int] = set()
    for d in cg.dirs(name):
        f = d / "cgroup.procs"
        if f.exists():
            pids |= {int(x) for x in f.read_text().split()}
    return sorted(pids)


def cg_remove(cg: Cgroups, name: str) -> None:
    """Kill what is left inside (by the pids the kernel lists there), then rmdir."""
    for _ in range(50):
        pids = cg_procs(cg, name)
        if not pids:
            break
        for pid in pids:
            kill(pid)
        time.sleep(0.05)
    for d in cg.dirs(name):
        if d.exists():
            d.rmdir()


# ------------------------------------------------------------------ processes
def proc_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (field 22 of /proc/pid/stat): guards against pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def kill(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
