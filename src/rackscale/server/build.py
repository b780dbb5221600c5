"""Building a store snapshot, in the server's interpreter or in a separate process.

At 128k GPUs a build is seconds of pure Python (the report's read of the store and its
ledger). In a thread of the server it competes with the request threads for the interpreter
lock and, on a busy machine, for the CPU: a builder thread descheduled while holding the lock
stalls every request. So a big build runs in a child process (`python -m
rackscale.server.build`) at a lower CPU priority, and only what the server serves crosses
back: the ledger's racks, findings and steps and the GPU counts, not the report's whole read
(its topology alone is 31 MB pickled). The racks come as many small pickles, unpickled one by
one, so taking them in never holds the lock for long either.

Protocol: the store URL and the seq go to the child's stdin as JSON (never argv, which other
users can read in `ps`: a PostgreSQL URL may hold a password); the child writes one pickle of
`Parts` to stdout. Both ends are this package, so the pickle is trusted input.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rackscale.report import Ledger, StoreView, ledger_now
from rackscale.state import serving_state
from rackscale.store import Store

UNENROLLED = "unenrolled"  # a GPU whose tray has no lifecycle state yet
CHUNK = 64  # racks (or findings) per pickle: a few ms to unpickle each
CHILD_NICE = 10  # the child yields the CPU to the server's request threads
CHILD_TIMEOUT_S = 600.0


class BuildError(RuntimeError):
    pass


@dataclass(slots=True, kw_only=True)
class Parts:
    """What the server keeps of one build."""

    seq: int
    built_s: float
    fleet: str
    ledger: Ledger  # gpu_reason emptied: the server serves no per-GPU row
    gpu_counts: dict[tuple[str, str, str], int]  # (lifecycle state, region, sku) -> GPUs
    pid: int  # the process that built it


def _gpu_counts(view: StoreView) -> dict[tuple[str, str, str], int]:
    """GPUs by the state that decides whether a job can use them (the fleet state's rule: a
    production tray of a rack that does not serve counts in its rack's state), region, SKU."""
    topo = view.topo
    tray_state: dict[int, str] = {}
    counts: Counter[tuple[str, str, str]] = Counter()
    for g in range(len(topo.gpu_ids)):
        tray = int(topo.gpu_tray[g])
        rack = topo.racks[int(topo.gpu_rack[g])]
        if tray not in tray_state:
            tray_state[tray] = serving_state(view.state_of(topo.ids[tray]),
                                             view.state_of(rack.id)) or UNENROLLED
        counts[(tray_state[tray], rack.region, str(topo.gpu_sku[g]))] += 1
    return dict(counts)


def build_parts(store: Store, seq: int) -> Parts:
    t0 = time.perf_counter()
    view, ledger = ledger_now(store)
    counts = _gpu_counts(view)
    return Parts(seq=seq, built_s=time.perf_counter() - t0, fleet=view.topo.spec.name,
                 ledger=replace(ledger, gpu_reason=[]), gpu_counts=counts, pid=os.getpid())


def _chunks(rows: list[Any]) -> list[bytes]:
    return [pickle.dumps(rows[i:i + CHUNK], protocol=5) for i in range(0, len(rows), CHUNK)]


def _unchunk(blobs: list[bytes]) -> list[Any]:
    rows: list[Any] = []
    for blob in blobs:  # between chunks the interpreter lock can pass to a request thread
        rows.extend(pickle.loads(blob))  # our own child's output
    return rows


def build_in_child(url: str, seq: int) -> Parts:
    """`build_parts` in a child process at lower priority. Raises BuildError (with the
    child's last words) when it fails."""
    src = str(Path(__file__).resolve().parents[2])  # the rackscale the server runs
    env = os.environ | {"PYTHONPATH": os.pathsep.join(
        [src, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.run([sys.executable, "-m", "rackscale.server.build"], env=env,
                          input=json.dumps({"url": url, "seq": seq}).encode(),
                          capture_output=True, timeout=CHILD_TIMEOUT_S, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise BuildError(f"snapshot build process exited {proc.returncode}: "
                         + " | ".join(tail))
    wire = pickle.loads(proc.stdout)  # bytes blobs inside: quick
    ledger: Ledger = wire["ledger"]
    ledger = replace(ledger, racks=_unchunk(wire["racks"]),
                     findings=_unchunk(wire["findings"]))
    return Parts(seq=wire["seq"], built_s=wire["built_s"], fleet=wire["fleet"], ledger=ledger,
                 gpu_counts=wire["gpu_counts"], pid=wire["pid"])


def _child() -> int:
    os.nice(CHILD_NICE)
    args = json.loads(sys.stdin.buffer.read())
    store = Store(args["url"], readonly=True)
    parts = build_parts(store, int(args["seq"]))
    store.close()
    led = parts.ledger
    wire = {"seq": parts.seq, "built_s": parts.built_s, "fleet": parts.fleet,
            "gpu_counts": parts.gpu_counts, "pid": parts.pid,
            "ledger": replace(led, racks=[], findings=[]),
            "racks": _chunks(led.racks), "findings": _chunks(led.findings)}
    sys.stdout.buffer.write(pickle.dumps(wire, protocol=5))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(_child())
