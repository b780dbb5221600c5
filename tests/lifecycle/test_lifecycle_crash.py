"""kill -9 in the middle of a power sequence: the restarted controller resumes without
duplicating or losing a transition (checked on the event log)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import select

from rackscale.fleet import Topology, seed_fleet
from rackscale.lifecycle import LifecycleRow, SimPlant, power_targets
from rackscale.lifecycle.states import ONBOARDING_PATH
from rackscale.store import Store, load_topology

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rackscale", "lifecycle", *args]


def test_kill9_mid_power_sequence_resumes_exactly_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'crash.db'}"
    plant_path = tmp_path / "plant.json"
    topo = Topology.build(seed_fleet())
    store = Store(db)
    load_topology(store, topo)
    plant = SimPlant.for_topology(topo, path=plant_path)
    plant.power_on_latency_s = 0.02  # each switch-on takes a little real time, like a shelf
    plant.save()
    targets = power_targets(topo)
    env = dict(os.environ, PYTHONPATH=SRC)
    args = ["--goal", "burn_in", "--db", db, "--plant", str(plant_path), "--period", "0"]
    proc = subprocess.Popen(_cli("run", *args), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)

    def mid_sequence() -> str | None:
        power = SimPlant.load(plant_path).power
        with store.session() as s:
            states = {c: st for c, st in s.execute(
                select(LifecycleRow.component_id, LifecycleRow.state)
                .where(LifecycleRow.machine == "rack"))}
        for rid, (shelves, _) in targets.items():
            on = sum(power[t] for t in shelves)
            if states.get(rid) == "cooling_verified" and 0 < on < len(shelves):
                return rid
        return None

    victim = None
    deadline = time.monotonic() + 60
    while victim is None and time.monotonic() < deadline and proc.poll() is None:
        victim = mid_sequence()
    assert victim is not None, f"never caught a rack mid-sequence: {proc.stderr.read()!r}"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    with store.session() as s:
        assert s.get(LifecycleRow, victim).state == "cooling_verified"
    before = store.count_events("lifecycle.transition")

    done = subprocess.run(_cli("run", *args, "--until-idle"), env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert store.count_events("lifecycle.transition") > before

    expected_rack = [None, *[s.value for s in ONBOARDING_PATH]]
    expected_tray = [None, "onboard", "seatrial", "burn_in"]
    seen: dict[str, list[str | None]] = {}
    for e in store.events(kind="lifecycle.transition"):
        seen.setdefault(e.component_id, [None]).append(e.payload["to"])
        assert seen[e.component_id][-2] == e.payload["from"], f"discontinuous: {e.as_dict()}"
    for rid, (_, trays) in targets.items():
        assert seen[rid] == expected_rack, f"{rid}: {seen[rid]}"
        for t in trays:
            assert seen[t] == expected_tray, f"{t}: {seen[t]}"
    power = SimPlant.load(plant_path).power
    assert all(power.values()), "some shelf or tray left off after resuming"
