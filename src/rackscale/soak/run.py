"""Run a soak: a supervised training job on the lab (`rackscale job run --runner lab`, its own
process) while the schedule's faults are injected for real and lifted after their repair
time; then its figures (`measure.py`), written beside the schedule and recorded in the store.

Everything goes to the output directory as it happens: `schedule.json` before the job starts,
`progress.jsonl` (every injection, every lift, and the job's progress every few seconds; one
line each, flushed and synced), the job's own directory `job/` (heartbeats, incidents,
checkpoints), and `soak.json` at the end. Whatever stops the soak, the faults it injected are
lifted and the job it started is stopped (by its pid) before it returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale import lab, owned
from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.faults import Fault
from rackscale.fleet import Topology, load_fleet, parent_id
from rackscale.recovery import JobState
from rackscale.soak.fleet import PLANT_BASIS, SoakFleet, stop_started
from rackscale.soak.measure import figures, job_steps
from rackscale.soak.predict import prediction
from rackscale.soak.schedule import Schedule, ScheduledFault
from rackscale.soak.storage import storage_summary

BIG = 10_000_000  # the job's length: it is stopped at the end of the soak, never finishes
# A recovery short of spares waits this long for repaired parts to rejoin: a repair is
# lifted after --repair-s (25 s) and certified (about 30 s) before its slot comes back, and
# without the wait a fault in that gap ended the soak (SparesExhausted).
SPARE_WAIT_S = 90.0
CLEAN_STEPS = 10  # steps of the first attempt before the first fault (the clean step time)
START_TIMEOUT_S = 240.0


class SoakError(UserError):
    pass


@dataclass(slots=True, kw_only=True)
class SoakSettings:
    lab_dir: Path
    out: Path
    schedule: Schedule
    spares: int
    db: str
    ckpt_every: int = 5
    config: Path | None = None  # the job's tiers config (`job run --config`); None: its default
    command: list[str] = field(default_factory=list)  # empty: the reference trainer
    detect: list[str] = field(default_factory=lambda: [
        "--straggler-threshold", "0.5", "--hang-floor-s", "20"])


Progress = Callable[[dict[str, Any]], None]


def _no_progress(_snap: dict[str, Any]) -> None:
    return None


class Log:
    """`progress.jsonl`: one line per event, flushed and synced as it is written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._f = path.open("a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> None:
        self._f.write(json.dumps({"kind": kind, "t": time.time(), **fields}) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def trainer_command(job_dir: Path) -> list[str]:
    """The reference trainer as the lab tests run it: wall-clock compute times (a CPU quota
    stretches a rank's wall time, as a slow GPU does), a step of about a quarter second."""
    return [sys.executable, "-m", "rackscale.recovery.trainer", "--steps", str(BIG),
            "--timing", "wall", "--batch", "1024", "--pace-s", "0.05", "--job-dir",
            str(job_dir)]


class Soak:
    def __init__(self, s: SoakSettings, progress: Progress = _no_progress) -> None:
        self.s, self.progress = s, progress
        self.job_dir = s.out / "job"
        self.st = lab.require_up(s.lab_dir, "job soak")
        self.plan = self.st.plan
        self.fleet_file = str(self.st.data["fleet_file"])
        self.topo = Topology.build(load_fleet(self.fleet_file))
        self.fleet: SoakFleet | None = None
        self.present: dict[int, dict[str, Any]] = {}  # schedule index -> lab fault (as stored)
        self.done: list[dict[str, Any]] = []  # every injected fault, as logged
        self.stopped_pids: list[int] = []
        # Read now: a config that is missing or no tiers config is refused before the lab works
        self.storage = storage_summary(s.config, self.job_dir)

    # --- the run ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        s = self.s
        s.out.mkdir(parents=True, exist_ok=True)
        if (s.out / "schedule.json").exists() or self.job_dir.exists():
            raise SoakError(f"{s.out}: holds a soak already (schedule.json or job/); give "
                            "a new --out directory")
        need = len(self.plan.ranks)
        if s.schedule.gpus + s.spares > need:
            raise SoakError(f"--job-gpus {s.schedule.gpus} + --spares {s.spares} exceed the "
                            f"lab's {need} GPUs")
        write_atomic(s.out / "schedule.json", json.dumps(s.schedule.to_dict(), indent=1))
        log = Log(s.out / "progress.jsonl")
        # Everything the soak starts, and what that starts, is recorded here by id
        owned.add_record(s.out / owned.RECORD)
        owned.record(os.getpid(), "soak", group=False)
        sup = None
        try:
            # The racks enter production on a certification of the lab, as the lifecycle
            # demands; the job's store is the fleet's, so the job reads the racks' cooling
            # response from it (cli/job.py).
            t0 = time.time()
            self.fleet = SoakFleet(lab_dir=s.lab_dir, fleet_file=self.fleet_file, out=s.out,
                                   db=s.db, topo=self.topo, log=log.write)
            self.fleet.bring_up()
            log.write("fleet_up", took_s=round(time.time() - t0, 3))
            load0 = os.getloadavg()
            t_launch = time.time()
            log.write("launch", host=socket.gethostname(), load_avg=load0)
            sup = self._start_job()
            t_end = self._drive(sup, log, t_launch)
        finally:
            self._lift_all(log)
            if sup is not None:
                self._stop(sup)
            if self.fleet is not None:
                self.fleet.stop()
            self._reap(log)
            log.write("stopped")
            log.close()
        return self._result(t_launch, t_end, load0)

    def _start_job(self) -> subprocess.Popen[bytes]:
        s = self.s
        self.job_dir.mkdir(parents=True)
        cmd = s.command or trainer_command(self.job_dir)
        args = [sys.executable, "-m", "rackscale", "job", "run", "--runner", "lab", "--lab",
                str(s.lab_dir), "--job-gpus", str(s.schedule.gpus), "--spares", str(s.spares),
                "--ckpt-every", str(s.ckpt_every), "--steps", str(BIG), "--max-restarts",
                "1000", "--spare-wait-s", str(SPARE_WAIT_S), "--job-dir", str(self.job_dir),
                "--db", s.db, *s.detect,
                *(["--config", str(s.config)] if s.config is not None else []), "--json",
                "--", *cmd]
        with (s.out / "job.out").open("wb") as out:
            # SIGTERM when the soak ends, even by SIGKILL: the supervisor then stops its ranks
            sup = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=owned.die_with_parent(signal.SIGTERM))
        owned.record(sup.pid, "supervisor")
        return sup

    def _drive(self, sup: subprocess.Popen[bytes], log: Log, t_launch: float) -> float:
        """Inject and lift on schedule until the soak's time is up; returns the end time."""
        s = self.s
        end = t_launch + s.schedule.duration_s
        pending = list(s.schedule.faults)
        lifts: dict[int, float] = {}
        last_snap = last_log = 0.0
        started, t_ready = False, end
        while time.time() < end:
            if sup.poll() is not None:
                tail = (s.out / "job.out").read_text(errors="replace")[-2000:]
                raise SoakError(f"the supervised job ended before the soak did (exit "
                                f"{sup.returncode}); see {s.out / 'job.out'}:\n{tail}")
            now = time.time()
            steps = job_steps(self.job_dir, s.schedule.gpus) if now - last_snap >= 1 else None
            if steps is not None:
                if not started and sum(1 for x in steps if x.attempt == 1) >= CLEAN_STEPS:
                    started, t_ready = True, now
                    log.write("ready", after_s=round(now - t_launch, 3))
                if not steps and now - t_launch > START_TIMEOUT_S:
                    raise SoakError(f"the job did not complete a step within "
                                    f"{START_TIMEOUT_S:.0f} s; see {s.out / 'job.out'}")
                snap = self._snapshot(steps, now - t_launch)
                self.progress(snap)
                if now - last_log >= 5:
                    log.write("progress", **snap)
                    last_log = now
                last_snap = now
            if self.fleet is not None:
                self.fleet.pass_now()
                self.fleet.poll(self.job_dir)
            for i, at in list(lifts.items()):
                if now >= at:
                    self._lift(i, log)
                    del lifts[i]
            if pending and started and now - t_ready >= pending[0].at_s:
                f = pending.pop(0)
                self._inject(f, log, late_s=now - t_ready - f.at_s)
                lifts[f.index] = time.time() + f.repair_s
            time.sleep(0.1)
        for f in pending:
            log.write("not_injected", index=f.index, why="the soak ended first (the job "
                      "was slow to start)")
        return time.time()

    def _snapshot(self, steps: list[Any], elapsed: float) -> dict[str, Any]:
        st = JobState.load(self.job_dir)
        return {"elapsed_s": round(elapsed, 1), "duration_s": self.s.schedule.duration_s,
                "step": steps[-1].step if steps else 0,
                "attempt": st.attempt if st else 0,
                "excluded": sorted(st.excluded) if st else [],
                "injected": len(self.done), "present": len(self.present)}

    # --- faults -------------------------------------------------------------------------------
    def _parts(self, gpu: str) -> dict[str, str]:
        r = next(r for r in self.plan.ranks if r.gpu == gpu)
        # `rack`: a cooling fault strikes the rack through its CDU (`<rack>/cdu`, the
        # injector's target); a lab rack is one NVLink domain.
        return {"gpu": r.gpu, "nic": r.nic, "leaf": r.leaf, "rack": f"{r.domain}/cdu",
                "rank": r.gpu}

    def _inject(self, f: ScheduledFault, log: Log, late_s: float) -> None:
        st = JobState.load(self.job_dir)
        if st is None or not st.rank_pids:
            log.write("not_injected", index=f.index, why="no rank was running")
            return
        slot = st.assignment[f.rank]
        target = self._parts(slot)[f.lab.part]
        a = f.lab
        t_inj = time.time()  # before the fault acts: a crash is seen within milliseconds
        row = {"index": f.index, "cause": f.cause, "action": a.action, "part": a.part,
               "of": a.of,
               "severity": a.severity, "component": target, "slot": slot, "rank": f.rank,
               "attempt": st.attempt, "late_s": round(max(0.0, late_s), 3)}
        if a.part == "rack":
            row["rack"] = parent_id(target)  # the CDU's rack, as the supervisor names it
        if a.action in ("kill", "hang"):
            pid = st.rank_pids[f.rank].pid  # the rank's process group, started by our job
            sig = signal.SIGKILL if a.action == "kill" else signal.SIGSTOP
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            if a.action == "hang":
                self.stopped_pids.append(pid)
        else:
            fault = Fault(target=target, kind=a.action, severity=a.severity, of=a.of,
                          duty=a.duty, period_s=a.period_s)
            lab.inject(self.s.lab_dir, [fault])
            state = lab.load_state(self.s.lab_dir)
            if state is None:  # inject just wrote it: only a lab torn down under us
                raise SoakError(f"the lab at {self.s.lab_dir} went away during the soak")
            self.present[f.index] = state.faults[-1]
            if "simulated" in state.faults[-1]:  # the flow of a cooling fault: no reading
                row["simulated"] = state.faults[-1]["simulated"]
            if a.part == "rack" and self.fleet is not None:  # the CDU the lifecycle reads
                row["plant"] = self.fleet.cooling(str(row["rack"]), a.severity or 0.0)
                # at once, not up to a period later: the lifecycle's response and the
                # job's reading of it count from the reading, as on a real CDU's alarm
                self.fleet.pass_now(force=True)
        row["injected_at"] = t_inj
        self.done.append(row)
        log.write("injected", **row)

    def _lift(self, index: int, log: Log, *, recertify: bool = True) -> None:
        want = self.present.pop(index, None)
        if want is not None:
            st = lab.load_state(self.s.lab_dir)
            faults = st.faults if st is not None else []
            if want in faults:
                lab.lift(self.s.lab_dir, faults.index(want))
        log.write("lifted", index=index)
        for row in self.done:
            if row["index"] != index:
                continue
            row["lifted_at"] = time.time()
            if self.fleet is not None and "rack" in row:
                self.fleet.restore(row["rack"])
            scope = self._repair_scope(row)
            if self.fleet is not None and recertify and scope is not None:
                self.fleet.recertify(index, scope)

    def _repair_scope(self, row: dict[str, Any]) -> str | None:
        """What is certified again after a repair before its slots rejoin: the rack of a
        cooling fault, the tray of a GPU, NIC or rank fault; none for a leaf (it holds no
        slot of its own; its ranks' trays are certified by their own faults)."""
        if "rack" in row:
            return str(row["rack"])
        if row.get("part") == "leaf":
            return None
        return self.topo.holder(row["slot"]).tray

    def _lift_all(self, log: Log) -> None:
        for i in list(self.present):
            with contextlib.suppress(UserError, OSError):
                self._lift(i, log, recertify=False)
        for pid in self.stopped_pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)

    def _reap(self, log: Log) -> None:
        """Whatever of the soak's record still runs once its job and certifications were
        stopped (a process that outlived its starter) is killed by its recorded id."""
        record = self.s.out / owned.RECORD
        before = owned.running(record, spare=owned.ancestry())
        if before:
            left = owned.reap(record)
            log.write("reaped", pids=sorted(before), roles=sorted(set(before.values())),
                      left=sorted(left))

    def _stop(self, sup: subprocess.Popen[bytes]) -> None:
        """Stop the supervisor this soak started (its ranks die with it)."""
        stop_started(sup, whole_group=False, grace_s=20)

    # --- the result ---------------------------------------------------------------------------
    def _result(self, t_launch: float, t_end: float, load0: tuple[float, ...]) -> dict[str, Any]:
        s = self.s
        fig = figures(job_dir=self.job_dir, gpus=s.schedule.gpus, spares=s.spares,
                      t_launch=t_launch, t_end=t_end, faults=self.done, seed=s.schedule.seed)
        recert = self.fleet.results if self.fleet is not None else {}
        for r in fig["faults"]:
            r["injected_at_s"] = round(r["injected_at"] - t_launch, 3)
            r["recertified"] = recert.get(r["index"])
        st = JobState.load(self.job_dir)
        out = {"measured": True, "basis": "measured on the lab (real processes, links and "
               "cgroups on one host); the faults' schedule drawn from the simulator's "
               "failure model", "host": socket.gethostname(),
               "load_avg": {"start": list(load0), "end": list(os.getloadavg())},
               "schedule": {"file": str(s.out / "schedule.json"), "seed": s.schedule.seed,
                            "failure_model": s.schedule.failure_model,
                            "faults": s.schedule.count, "rate_scale": s.schedule.rate_scale},
               "job": {"id": st.job_id if st else None, "gpus": s.schedule.gpus,
                       "spares": s.spares, "attempts": st.attempt if st else 0,
                       "excluded": st.excluded if st else {}, "dir": str(self.job_dir),
                       "ckpt_every": s.ckpt_every},
               "lab": str(s.lab_dir), "storage": self.storage,
               **fig,
               "lifecycle": {"plant": PLANT_BASIS,
                             "transitions": self.fleet.transitions if self.fleet else [],
                             "states": self.fleet.states if self.fleet else {},
                             # slots a certification passed that the lifecycle did not
                             # serve again before the end: the job never got them back
                             "returns_waiting": [r.slots for r in self.fleet.releases]
                             if self.fleet else []}}
        out["predicted"] = prediction(out, s.schedule)  # simulated, beside the measurement
        write_atomic(s.out / "soak.json", json.dumps(out, indent=1))
        return out
