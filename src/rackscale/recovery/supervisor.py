"""The supervisor: launch a job's ranks on their slots, watch them, and keep the job alive.

One loop per attempt: every rank starts from the latest committed checkpoint; the detectors
(`detect.py`) watch exit codes and heartbeats; on a fault the suspect's slot is excluded (a
`certify.finding`), every rank is stopped, a hot spare takes the slot's rank, and the next
attempt starts. A fault on every rank before any step (a command that cannot run) is the
command's fault, not a GPU's: the job stops with exit 2 and excludes nothing. Checkpoints are
never deleted here: whatever happens to the job, every committed checkpoint stays.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import socket
import statistics
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NoReturn

from rackscale import owned
from rackscale.certify import Placement
from rackscale.checkpoint import ResumePoint, Tiers, TiersConfig, for_job, resume_point
from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.faults import COOLANT_FLOW_LOW
from rackscale.recovery.cadence import CADENCE_FILE
from rackscale.recovery.cadence import say as say_cadence
from rackscale.recovery.config import JobConfig
from rackscale.recovery.detect import (
    CollectiveDetector,
    StragglerDetector,
    Suspect,
    Symptom,
    find_fail_stop,
    find_hang,
    timeout_of,
)
from rackscale.recovery.events import IncidentPayload
from rackscale.recovery.heartbeat import RUN_ENV, BeatReader, RankBeats
from rackscale.recovery.launch import Excluder, Launcher, RankProcess, master_addr, stop_all
from rackscale.recovery.localize import Localized, Localizer
from rackscale.recovery.racks import HotRacks, RackMove, SparesExhausted, hot_rack_move
from rackscale.recovery.record import Recorder
from rackscale.recovery.returns import read_returns
from rackscale.recovery.state import JobState, RankPid, alive_ranks, start_ticks
from rackscale.recovery.warm import WarmPool


class CommandFailed(UserError):
    pass


@dataclass(slots=True, kw_only=True)
class JobSetup:
    """Everything a supervisor needs besides its settings."""

    job: str
    job_dir: Path
    tiers: TiersConfig
    launcher: Launcher
    placement: Placement  # every slot (GPUs first, then spares) and how to start its rank
    recorder: Recorder
    localizer: Localizer | None = None  # probes suspects' GPUs and NICs (None: no probe)
    # Which racks have a cooling condition (None: not known here; stragglers are then
    # handled GPU by GPU)
    hot_racks: HotRacks | None = None


@dataclass(slots=True)
class Outcome:
    finished: bool
    suspect: Suspect | None = None
    ranks: list[RankBeats] = field(default_factory=list)
    detected_at: float = 0.0
    # The racks the lifecycle drained for their cooling while the job ran in them (no rank
    # showed a symptom; the job must leave them), with their conditions
    drained: dict[str, Mapping[str, Any]] = field(default_factory=dict)


# how often a running job asks whether a rack it uses was drained, and takes returned slots
DRAIN_POLL_S = 2.0


def latest_committed(tiers: Tiers) -> tuple[str | None, int]:
    """The newest checkpoint committed in the region tier (the tier every node reads) that
    some tier holds intact; (None, 0) when there is none. A save cut short has no manifest
    there, so it can never be chosen; a damaged or incomplete one is passed over."""
    point = resume_point(tiers)
    return point.id, point.step


def new_job_id(name: str) -> str:
    """A job's identity in the tiers: its name (made safe for a key) and a random part, so
    two jobs whose directories have the same name still have key spaces of their own."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".-")[:64] or "job"
    return f"{safe}-{uuid.uuid4().hex[:8]}"


def state_origin(state: JobState, here: str) -> Literal["here", "moved", "copy"]:
    """Where a job state found in a directory of identity `here` was written: in it (or in
    it before a rename, which keeps the inode), in a directory since moved away, or in one
    still there, with its identity and the same job: then this directory is a copy."""
    if state.home in (None, here):
        return "here"
    if not state.home_path:
        return "moved"
    try:
        # The job too: a directory made after the original was removed may reuse its inode.
        original = JobState.load(state.home_path)
        alive = (original is not None and original.job_id == state.job_id
                 and owned.dir_identity(Path(state.home_path)) == state.home)
    except (OSError, UserError):  # gone, unreadable or damaged: not a live original
        alive = False
    return "copy" if alive else "moved"


def _no_note(_message: str) -> None:
    return None


class Supervisor:
    def __init__(self, cfg: JobConfig, setup: JobSetup, *,
                 note: Callable[[str], None] = _no_note) -> None:
        self.cfg, self.setup = cfg, setup
        self.note = note  # says what the operator should know (the CLI prints it on stderr)
        self.run_id = ""  # the running attempt's id (its ranks' beats carry it)
        self.cadence_said = 0  # the attempt whose checkpoint interval was said
        self.copy_note = ""
        self.forked = False  # a copy of a job directory whose original is still there
        self.state = self._initial_state()
        self.scope_note = ""
        if self.state.job_id is None:  # new, or a state written before jobs had an id
            if self.state.attempt > 0 and not self.forked:
                self.scope_note = ("this job's state predates per-job checkpoints: it gets "
                                   "its own key space now and starts afresh (its old "
                                   "checkpoints are kept, but carry no job and are never "
                                   "resumed)")
            self.state.job_id = new_job_id(self.state.job)
        self.tiers = Tiers(for_job(setup.tiers, self.state.job_id))
        # The ranks read the job's own tiers config (the job id in it), so a trainer that
        # loads RACKSCALE_CKPT_CONFIG saves and restores in the job's key space only.
        self.tiers_file = setup.job_dir / "tiers.json"
        write_atomic(self.tiers_file, self.tiers.cfg.model_dump_json(indent=2))
        os.chmod(self.tiers_file, 0o600)
        self.verified: set[tuple[str, str]] = set()
        self.skipped_said: set[str] = set()
        self.procs: list[RankProcess] = []
        self.pending: IncidentPayload | None = None
        self.pending_t: tuple[float, float] = (0.0, 0.0)  # decided at, launched at
        # The job's best collective time carries over restarts: a fault present from an
        # attempt's first step (a bad NIC left in the job) is slow against it too.
        self.best_collective: float | None = None
        # (attempt, what follows) for which an unreadable cooling source was said
        self.cooling_said: set[tuple[int, str]] = set()
        self.pool = WarmPool(setup.launcher, setup.placement, cfg.command, setup.job_dir,
                             note=note) if cfg.warm else None

    def _initial_state(self) -> JobState:
        slots = list(self.setup.placement.ranks)
        need = self.cfg.gpus + self.cfg.spares
        if len(slots) < need:
            raise UserError(f"the placement has {len(slots)} GPU slots; --job-gpus "
                            f"{self.cfg.gpus} + --spares {self.cfg.spares} need {need}")
        old = JobState.load(self.setup.job_dir)
        if old is not None:
            if old.gpus != self.cfg.gpus or old.command != self.cfg.command:
                raise UserError(f"{JobState.path(self.setup.job_dir)} belongs to a job of "
                                f"{old.gpus} GPUs running {old.command}; use another "
                                "--job-dir, or the same --job-gpus and command to resume it")
            ranks = self.setup.placement.ranks
            gone = [g for g in (*old.assignment, *old.spares) if g not in ranks]
            if gone:  # e.g. started on this host's ids, resumed with a fleet in --db
                raise UserError(f"{JobState.path(self.setup.job_dir)} runs on GPU slot "
                                f"{gone[0]}, which {self.setup.placement.describe} does not "
                                "have; resume it where it started (same --runner and --db), "
                                "or use another --job-dir")
            self._adopt(old)
            return old
        return JobState(job=self.setup.job, command=self.cfg.command, gpus=self.cfg.gpus,
                        assignment=slots[:self.cfg.gpus], spares=slots[self.cfg.gpus:need],
                        home=owned.dir_identity(self.setup.job_dir),
                        home_path=str(self.setup.job_dir.resolve()))

    def _adopt(self, old: JobState) -> None:
        """Take over a state found in the job directory; if it was written in another
        directory, leave that one's processes alone, and if that directory is still there
        (a copy, not a move) give this job an identity of its own."""
        here = owned.dir_identity(self.setup.job_dir)
        origin = state_origin(old, here)
        if origin != "here":
            # The ranks recorded there are another directory's (the original's, maybe
            # running still): never stopped from here.
            old.rank_pids = []
            if origin == "copy":
                # The original is where it was: two jobs would share one key space, each
                # resuming (and retiring) the other's checkpoints.
                old.job_id, self.forked = None, True
                self.copy_note = (f"this job directory is a copy of {old.home_path}, which "
                                  "is still there: it runs as a job of its own, with its own "
                                  "checkpoints (none yet, so it starts from the beginning), "
                                  "and the processes recorded in it are left alone")
            else:
                self.copy_note = ("this job directory is a copy (or was moved across file "
                                  "systems): the processes recorded in it are left alone")
        old.home, old.home_path = here, str(self.setup.job_dir.resolve())

    # --- the loop -----------------------------------------------------------------------------
    def run(self) -> JobState:
        if self.state.finished:  # run again on a finished job's directory: nothing to do
            return self.state
        self.setup.launcher.check(self.cfg.command)
        ckpt_id = self._resume_point().id  # an unreachable store stops us here
        resumed = self.state.attempt > 0
        self._stop_leftovers()
        rec = self.setup.recorder
        for said in (self.scope_note, self.copy_note):
            if said:
                self.note(f"job {self.state.job}: {said}")
        rec.job(self.state, "resumed" if resumed else "started", ckpt_id, self.scope_note)
        try:
            return self._loop()
        finally:  # however the loop ends (done, failed, a signal): nothing it started runs on
            stop_all(self.procs, self.cfg.stop_timeout_s)
            if self.pool is not None:
                self.pool.close(self.cfg.stop_timeout_s)
            self._reap("at its end")

    def _loop(self) -> JobState:
        rec = self.setup.recorder
        restarts = 0
        while True:
            ckpt_id = self._resume_point().id
            self._launch(ckpt_id)
            out = self._monitor()
            if out.finished:
                self._finish_pending(out.ranks)
                self.state.finished, self.state.rank_pids = True, []
                self.state.save(self.setup.job_dir)
                rec.job(self.state, "finished", ckpt_id)
                return self.state
            if self.pending is not None:  # failed again before its first step
                rec.incident(self.pending.model_copy(update={"outcome": "failed_again"}))
                self.pending = None
            self._recover(out)
            restarts += 1
            if restarts > self.cfg.max_restarts:
                self._fail(f"the job failed {restarts} times (--max-restarts "
                           f"{self.cfg.max_restarts}); see {self.setup.job_dir}/logs")

    def _launch(self, ckpt_id: str | None) -> None:
        st, setup = self.state, self.setup
        st.attempt += 1
        self.run_id = uuid.uuid4().hex[:12]  # this attempt's beats carry it (heartbeat.py)
        self._set_aside_beats()
        port = _free_port()
        # rank 0 hosts the rendezvous: its scale-out address (a lab namespace's own address,
        # a Slurm node's; the loopback when every rank is a process on this host)
        master = master_addr(setup.placement.place(st.assignment[0]))
        self.procs = []
        for rank, slot in enumerate(st.assignment):
            env = {"RANK": str(rank), "WORLD_SIZE": str(st.gpus), "LOCAL_RANK": "0",
                   "MASTER_ADDR": master, "MASTER_PORT": str(port),
                   "RACKSCALE_JOB_DIR": str(setup.job_dir), "RACKSCALE_SLOT": slot,
                   "RACKSCALE_ATTEMPT": str(st.attempt), RUN_ENV: self.run_id,
                   "RACKSCALE_CKPT_CONFIG": str(self.tiers_file),
                   "RACKSCALE_JOB_ID": st.job_id or "",
                   "RACKSCALE_RESUME": ckpt_id or ""}
            log = setup.job_dir / "logs" / f"a{st.attempt:03d}-r{rank:04d}.log"
            proc = self.pool.take(slot, env) if self.pool is not None else None
            if proc is None:  # a standby taken was recorded when it started
                proc = setup.launcher.start(setup.placement.place(slot), self.cfg.command,
                                            env, log)
                owned.record(proc.pid, "rank")
            self.procs.append(proc)
        st.rank_pids = [RankPid(pid=p.pid, start_ticks=start_ticks(p.pid) or 0)
                        for p in self.procs]
        st.save(setup.job_dir)
        self.launched_at = time.time()
        if self.pool is not None:  # standbys for the next restart, started in the background
            self.pool.refill([*st.assignment, *st.spares])
        if self.pending is not None:
            self.pending = self.pending.model_copy(
                update={"restart_s": round(self.launched_at - self.pending_t[0], 4)})

    def _say_cadence(self) -> None:
        """The checkpoint interval rank 0 chose (cadence.py), with its inputs: said once per
        attempt, when it first appears in this attempt (the file keeps the latest)."""
        path = self.setup.job_dir / CADENCE_FILE
        try:
            at = path.stat().st_mtime
        except FileNotFoundError:
            return
        if self.cadence_said == self.state.attempt or at < self.launched_at:
            return
        self.cadence_said = self.state.attempt
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:  # written atomically: only a foreign file is unreadable
            self.note(f"job {self.state.job}: {path} cannot be read ({err})")
            return
        self.note(f"job {self.state.job}: {say_cadence(d)}")

    def _set_aside_beats(self) -> None:
        """Beat files of this attempt or later that are here before its ranks start were
        written by another run (a job directory used again, or copied): moved to
        `beats/stale-<id>/`, kept, and said; the attempt's ranks start new files."""
        st, d = self.state, self.setup.job_dir / "beats"
        stale = [p for p in d.glob("a*-r*.jsonl")
                 if p.name[1:4].isdigit() and int(p.name[1:4]) >= st.attempt]
        if not stale:
            return
        away = d / f"stale-{self.run_id}"
        away.mkdir(parents=True)
        for p in stale:
            p.rename(away / p.name)
        self.note(f"job {st.job}: {len(stale)} heartbeat file(s) of attempt {st.attempt} or "
                  f"later were here before its ranks started (another run's); moved to {away}")

    def _monitor(self) -> Outcome:
        cfg = self.cfg
        reader = BeatReader(self.setup.job_dir, self.state.attempt, self.state.gpus,
                            self.run_id)
        slow = StragglerDetector(self.state.gpus, cfg.detect)
        # Only a runner that can probe names the part behind a slow collective; without
        # one, all ranks suspected alike leave nothing to exclude.
        coll = CollectiveDetector(self.state.gpus, cfg.detect, best=self.best_collective) \
            if self.setup.localizer is not None else None
        said = False  # a straggler left to finish the job is said once
        flagged: dict[int, int] = {}  # rank -> step of its unconfirmed straggler flag
        next_drain = 0.0
        while True:
            codes = [p.poll() for p in self.procs]
            ranks = reader.poll()
            if self.pool is not None:  # standbys wait for a rank to show the command takes them
                self.pool.tick(any(r.first_step_at for r in ranks))
            for r, c in enumerate(codes):
                if c == 0:  # finished its part: silence from it now is no hang
                    ranks[r].done = True
            # Completion wins: once every rank has done its last step (its `done` beat, or
            # exit 0) the job's work is complete, and what the detectors would make of the
            # last steps' times, or of a rank still tearing down, cannot undo it.
            if all(rb.done for rb in ranks):
                return self._finished(reader)
            if self.pending is not None and all(r.first_step_at for r in ranks):
                self._finish_pending(ranks)
            now = time.time()
            suspect = (find_fail_stop(codes, ranks)
                       or find_hang(ranks, now, self.launched_at, cfg.detect,
                                    stopped=lambda r: self.procs[r].stopped())
                       or slow.feed(ranks) or (coll.feed(ranks) if coll else None))
            self.best_collective = coll.best if coll else None
            if suspect is not None and suspect.kind is Symptom.STRAGGLER \
                    and self._left_to_finish(suspect, said):
                said, suspect = True, None
            if suspect is not None and suspect.kind is Symptom.STRAGGLER \
                    and not self._confirmed(suspect, flagged):
                suspect = None
            if suspect is not None:
                return Outcome(finished=False, suspect=suspect, ranks=ranks, detected_at=now)
            if now >= next_drain:
                next_drain = now + DRAIN_POLL_S
                self._say_cadence()
                self._take_returns()
                drained = self._drained()
                if drained:
                    return Outcome(finished=False, ranks=ranks, detected_at=now,
                                   drained=drained)
            time.sleep(cfg.poll_s)

    def _finished(self, reader: BeatReader) -> Outcome:
        """Every rank has done its work: its process gets the stop timeout to exit (a
        process group's teardown, its result being written), then is stopped."""
        deadline = time.time() + self.cfg.stop_timeout_s
        while any(p.poll() is None for p in self.procs) and time.time() < deadline:
            time.sleep(self.cfg.poll_s)
        left = stop_all(self.procs, self.cfg.stop_timeout_s)
        if left:
            self._fail(f"ranks {left} did not stop after SIGKILL within "
                       f"{self.cfg.stop_timeout_s}s")
        return Outcome(finished=True, ranks=reader.poll())

    def _confirmed(self, sus: Suspect, flagged: dict[int, int]) -> bool:
        """Whether a straggler is evidence enough to act on. A runner with a probe checks the
        suspect's parts before anything is excluded; without one (local), the exclusion
        spends a spare on the scores alone, so the rank must be flagged again a window of
        `straggler_steps` steps after its first flag (still slow, or slow again after one
        noisy step reset its count): a transient slowdown (other work on the host's cores)
        passes within one window, a slow part does not. A first flag older than three
        windows is forgotten (the rank recovered), and this one starts the wait again."""
        if self.setup.localizer is not None or sus.candidates:
            return True
        step, k = int(sus.evidence.get("step", 0)), self.cfg.detect.straggler_steps
        first = flagged.setdefault(sus.rank, step)
        if step - first > 3 * k:
            flagged[sus.rank] = first = step
        return step - first >= k

    def _left_to_finish(self, sus: Suspect, said: bool) -> bool:
        """Whether a straggler flagged this near the job's end (`steps`, when known) is left
        to finish it: a restart resumes from a checkpoint up to `ckpt_every` steps back,
        so it redoes those and every step left, after a process start and a restore; under
        two checkpoint intervals from the end, finishing on the slow rank costs less. Said
        to the operator; a rank that then stops is still caught (crash, hang), and a job
        that runs past `steps` (a command that counts its own) is acted on as before."""
        step, end = int(sus.evidence.get("step", 0)), self.cfg.steps
        if end is None or not 0 <= end - step < 2 * self.cfg.ckpt_every:
            return False
        if said:
            return True
        who = f"rank {sus.rank}" if not sus.candidates else "the job's collective"
        self.note(f"job {self.state.job}: {who} slow at step {step} of {end} "
                  f"(score {sus.evidence.get('relative', sus.evidence.get('individual'))}); "
                  "left to finish: a restart would redo more steps than are left")
        return True

    # --- after a fault ------------------------------------------------------------------------
    def _recover(self, out: Outcome) -> None:
        sus, src = out.suspect, self.setup.hot_racks
        self._take_returns()
        code = sus.evidence.get("exit_code") if sus is not None else None
        if sus is not None and sus.kind is Symptom.FAIL_STOP and code is not None and \
                code > 0 and not any(r.steps_seen for r in out.ranks):
            self._check_command(out)
        st = self.state
        slow = sus is None or sus.kind is Symptom.STRAGGLER  # a drained rack is slow too
        if slow:
            self._let_the_step_finish(out)
        t0 = time.time()
        self._stop_ranks()
        stopped = time.time()
        # A straggler in a hot rack is its rack's cooling, not its GPU: no probe, and the
        # rack's slots leave together (its other ranks would straggle next, one restart each);
        # a rack the lifecycle drained leaves the same way.
        hot = out.drained or (self._hot_racks(src, sus) if src and sus and slow else {})
        if src and hot:
            self._rack_move(src, sus, out, hot, (t0, stopped))
            return
        if sus is None:
            raise RuntimeError("_recover needs a suspect or a drained rack")
        loc = self._localize(sus, out)  # after the stop: the probe needs the CPU and links
        localized = time.time()
        # Not localized: a straggler restarts unexcluded (slow is no proof of a bad part); a
        # hang's silent rank is excluded by its symptom, as without a probe (it did stop).
        if loc is not None and loc.gpu is None and sus.kind is Symptom.STRAGGLER and (
                sus.candidates or "error" not in loc.evidence):
            self._unlocalized(sus, out, loc, localized - stopped)
            return
        slot = st.assignment[sus.rank]
        point = self._resume_point()  # what the restart resumes from
        ckpt_id, ckpt_step = point.id, point.step
        rb = out.ranks[sus.rank]
        detect_s, detect_steps = _detect_time(sus, rb, out)
        done = max((r.done_step for r in out.ranks), default=0)
        st.excluded[slot] = f"{sus.kind.value} of rank {sus.rank} (attempt {st.attempt})"
        self._wait_for_spares(lambda: bool(st.spares))
        spare = st.spares.pop(0) if st.spares else None
        inc = IncidentPayload(
            job=st.job, attempt=st.attempt, symptom=sus.kind.value, rank=sus.rank,
            component=slot, fault_kind="", spare=spare, evidence=sus.evidence,
            detected_at=out.detected_at, detect_s=detect_s, detect_steps=detect_steps,
            localize_s=round(localized - stopped, 4), stop_s=round(stopped - t0, 4),
            ckpt_id=ckpt_id, ckpt_step=ckpt_step, work_lost_steps=max(0, done - ckpt_step),
            step_s=_step_time(out.ranks, sus.rank), host=socket.gethostname())
        if loc is not None:
            upd: dict[str, object] = {"evidence": {**inc.evidence, "localize": loc.evidence
                                                   | {"kind": loc.kind}}}
            if loc.component is not None:
                upd |= {"slot": slot, "component": loc.component, "fault_kind": loc.kind or ""}
            inc = inc.model_copy(update=upd)
        if isinstance(self.setup.launcher, Excluder):  # e.g. a Slurm drain of its node
            node = self.setup.launcher.exclude(self.setup.placement.place(slot),
                                               f"{st.excluded[slot]} of job {st.job}")
            inc = inc.model_copy(update={"evidence": {**inc.evidence, "drained": node}})
        inc = inc.model_copy(update={"fault_kind": self.setup.recorder.exclude(inc)})
        if spare is None:
            inc = inc.model_copy(update={"outcome": "no_spare"})
            self.setup.recorder.incident(inc)
            st.rank_pids = []
            st.save(self.setup.job_dir)
            self._fail(f"{slot} was excluded ({inc.symptom}) and no spare is left "
                       f"({len(st.excluded)} exclusions, --spares {self.cfg.spares}); every "
                       f"checkpoint is kept (latest: {ckpt_id}); add spares and run the same "
                       f"command again to resume")
        st.assignment[sus.rank] = spare
        st.save(self.setup.job_dir)
        self.pending, self.pending_t = inc, (out.detected_at, 0.0)

    def _stop_ranks(self) -> None:
        left = stop_all(self.procs, self.cfg.stop_timeout_s)
        if left:
            self._fail(f"ranks {left} did not stop after SIGKILL within "
                       f"{self.cfg.stop_timeout_s}s")

    def _take_returns(self) -> None:
        """Slots returned after a certified repair (returns.py) become spares again; a slot
        this job no longer excludes (returned twice) is passed over. Said, and recorded.
        Asked while the job runs (spares are only taken at a restart) and before each
        recovery."""
        st = self.state
        new = read_returns(self.setup.job_dir, st.returns_read)
        for ret in new:
            back = [s for s in ret.slots if s in st.excluded]
            for s in back:
                del st.excluded[s]
                st.spares.append(s)
            if back:
                why = json.dumps(ret.evidence, sort_keys=True)
                self.note(f"job {st.job}: {', '.join(back)} back as spare(s) on {why}")
                self.setup.recorder.job(st, "rejoined", None, why, slots=back)
        if new:
            st.returns_read += len(new)
            st.save(self.setup.job_dir)

    def _wait_for_spares(self, enough: Callable[[], bool]) -> None:
        """Until `enough()` or `spare_wait_s` has passed, take the slots returned after a
        certified repair, once a second; said when it waits. The ranks are stopped by now:
        the time is the job's, waiting for capacity."""
        if enough() or self.cfg.spare_wait_s <= 0:
            return
        self.note(f"job {self.state.job}: too few spares; waiting up to "
                  f"{self.cfg.spare_wait_s:g} s for repaired slots to rejoin")
        # Saved now, so the exclusion that made the job wait shows while it waits (an
        # operator returns a slot on what the state says is excluded).
        self.state.rank_pids = []
        self.state.save(self.setup.job_dir)
        deadline = time.monotonic() + self.cfg.spare_wait_s
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
            self._take_returns()
            if enough():
                return

    def _drained(self) -> dict[str, Mapping[str, Any]]:
        """The racks the job uses that the lifecycle drained for their cooling (`drain` in
        their condition), with their conditions; none when no source knows, or it cannot be
        read now (said once per attempt: the job goes on, and stragglers still count)."""
        src, st = self.setup.hot_racks, self.state
        if src is None:
            return {}
        now = self._cooling_now(src, "no rack is left for its cooling until it can be")
        used = {src.rack_of.get(s) for s in st.assignment}
        drained = {r: c for r, c in now.items() if c.get("drain") and r in used}
        return now if drained else {}

    def _hot_racks(self, src: HotRacks, sus: Suspect) -> dict[str, Mapping[str, Any]]:
        """Every rack with a cooling condition now (and the condition), when one of them holds
        a suspect's slot; else none. A source that cannot be read is said and counts as
        none: the straggler then goes the GPU-by-GPU way, as with no source at all."""
        st = self.state
        now = self._cooling_now(src, "the straggler is handled GPU by GPU")
        racks = {src.rack_of.get(st.assignment[r]) for r in sus.candidates or (sus.rank,)}
        return now if racks & now.keys() else {}

    def _cooling_now(self, src: HotRacks, otherwise: str) -> dict[str, Mapping[str, Any]]:
        """The source's racks with a cooling condition now. One that cannot be read counts
        as none, and is said once per attempt with what follows (`otherwise`)."""
        try:
            return dict(src.conditions())
        except (UserError, OSError) as err:
            said = (self.state.attempt, otherwise)
            if said not in self.cooling_said:
                self.cooling_said.add(said)
                self.note(f"job {self.state.job}: the racks' cooling could not be read "
                          f"({err}); {otherwise}")
            return {}

    def _rack_move(self, src: HotRacks, sus: Suspect | None, out: Outcome,
                   hot: Mapping[str, Mapping[str, Any]], t: tuple[float, float]) -> None:
        """The hot racks' slots in the job are excluded as one, spares from other racks take
        their ranks, and one incident names the suspect's rack (`coolant_flow_low`; with no
        suspect, a rack the lifecycle drained: symptom `drain`); each hot rack gets its
        finding. Too few spares outside the hot racks: every such slot is
        excluded all the same, and the job stops as the per-slot path does (no_spare)."""
        st = self.state
        short: SparesExhausted | None = None
        def enough() -> bool:
            try:
                hot_rack_move(st.assignment, st.spares, src.rack_of, hot)
            except SparesExhausted:
                return False
            return True

        self._wait_for_spares(enough)
        try:
            move = hot_rack_move(st.assignment, st.spares, src.rack_of, hot)
        except SparesExhausted as err:
            # The same slots leave all the same, with no spare taken: they are excluded and
            # the job stops, as a lone slot with no spare is.
            if err.move is None:
                raise
            short, move = err, err.move
        for s in move.exclude:
            st.excluded[s] = f"{COOLANT_FLOW_LOW} of rack {src.rack_of[s]} (attempt {st.attempt})"
        inc = self._rack_incident(src, sus, out, move, hot, t)
        if isinstance(self.setup.launcher, Excluder):  # e.g. a Slurm drain of each node
            drained = [self.setup.launcher.exclude(self.setup.placement.place(s),
                                                   f"{st.excluded[s]} of job {st.job}")
                       for s in move.exclude]
            inc = inc.model_copy(update={"evidence": {**inc.evidence, "drained": drained}})
        for rack in (inc.component, *(r for r in move.racks if r != inc.component)):
            self.setup.recorder.exclude(inc.model_copy(update={"component": rack}))
        if short is not None:
            self.setup.recorder.incident(inc.model_copy(update={"outcome": "no_spare"}))
            st.rank_pids = []
            st.save(self.setup.job_dir)
            self._fail(f"{short}. The {len(move.exclude)} slots of rack(s) "
                       f"{', '.join(move.racks)} were excluded ({COOLANT_FLOW_LOW}); every "
                       f"checkpoint is kept (latest: {inc.ckpt_id}); run the same command "
                       "again to resume")
        for old, spare in move.moves.items():
            st.assignment[st.assignment.index(old)] = spare
        st.spares = list(move.spares_left)
        st.save(self.setup.job_dir)
        self.pending, self.pending_t = inc, (out.detected_at, 0.0)

    def _rack_incident(self, src: HotRacks, sus: Suspect | None, out: Outcome,
                       move: RackMove, hot: Mapping[str, Mapping[str, Any]],
                       t: tuple[float, float]) -> IncidentPayload:
        """The one incident of a hot-rack move: on the rack of the suspect's slot (the first
        suspect in a hot rack; with none, the job's first slot in a drained rack), its
        evidence the slots excluded, the spare each took and each hot rack's cooling
        condition as the source gave it (the lab's: simulated flow). A drain's detection
        time runs from the fault's first sighting by the lifecycle to the job's decision."""
        st = self.state
        if sus is not None:
            slot = next(st.assignment[r] for r in sus.candidates or (sus.rank,)
                        if src.rack_of[st.assignment[r]] in hot)
        else:
            slot = move.exclude[0]
        rank = st.assignment.index(slot)
        point = self._resume_point()  # what the restart resumes from
        if sus is not None:
            detect_s, detect_steps = _detect_time(sus, out.ranks[rank], out)
        else:
            since = [c["since"] for c in hot.values() if c.get("since") is not None]
            detect_s = round(out.detected_at - min(since), 4) if since else None
            detect_steps = None
        done = max((r.done_step for r in out.ranks), default=0)
        evidence = {**(sus.evidence if sus else {}), "racks": list(move.racks),
                    "excluded": list(move.exclude), "moves": dict(move.moves),
                    "cooling": {r: dict(hot[r]) for r in move.racks}}
        return IncidentPayload(
            job=st.job, attempt=st.attempt, symptom=sus.kind.value if sus else "drain",
            rank=rank,
            component=src.rack_of[slot], fault_kind=COOLANT_FLOW_LOW, slot=slot,
            spare=move.moves.get(slot), evidence=evidence, detected_at=out.detected_at,
            detect_s=detect_s, detect_steps=detect_steps, localize_s=0.0,
            stop_s=round(t[1] - t[0], 4), ckpt_id=point.id, ckpt_step=point.step,
            work_lost_steps=max(0, done - point.step), step_s=_step_time(out.ranks, rank),
            host=socket.gethostname())

    def _let_the_step_finish(self, out: Outcome) -> None:
        """A straggler is slow, not stopped: every rank completes the step it is in before
        the stop, and with it the checkpoint that step may be saving. Stopped in the middle
        of a save, the ranks that were done have committed their parts and the checkpoint is
        not: the job would resume from the one before, and its re-save of this step would be
        refused (committed parts are never written again). Bounded by the ranks' own hang
        timeouts; a rank that is past it is stopped as it is."""
        target = max((r.last_step for r in out.ranks), default=-1)
        reader = BeatReader(self.setup.job_dir, self.state.attempt, self.state.gpus,
                            self.run_id)
        ranks = reader.poll()
        deadline = time.time() + max(timeout_of(r, self.cfg.detect) for r in ranks)
        while time.time() < deadline:
            codes = [p.poll() for p in self.procs]
            if any(c is not None for c in codes) or all(
                    r.done_step >= target for r in ranks):
                return
            time.sleep(self.cfg.poll_s)
            ranks = reader.poll()

    def _localize(self, sus: Suspect, out: Outcome) -> Localized | None:
        """The targeted probe of the suspects' GPUs and NICs, when this runner has one; sets
        the suspect's rank to the one whose part it names. Not localized with an `error` in
        its evidence: the probe could not decide (too few healthy GPUs, a probe failed).

        Probed: a straggler, and a hang the OS does not explain (no rank stopped). A dead
        NIC or cable stalls the all-reduce of every rank alike, so the rank that went silent
        first says little about whose part it is: every silent rank is a suspect then."""
        loc_er, st = self.setup.localizer, self.state
        if loc_er is None:
            return None
        if sus.kind is Symptom.STRAGGLER:
            ranks = sus.candidates or (sus.rank,)
        elif sus.kind is Symptom.HANG and not sus.evidence.get("os_stopped"):
            ranks = tuple(r.rank for r in out.ranks if not r.done) or (sus.rank,)
        else:
            return None
        cands = [st.assignment[r] for r in ranks]
        healthy = [s for s in st.assignment if s not in cands] + list(st.spares)
        try:
            loc = loc_er.localize(cands, healthy)
        except (UserError, OSError, RuntimeError, ValueError) as err:
            # A probe that cannot run is no verdict on the part: recorded in the incident,
            # and a lone straggler is then excluded by its symptom, as without a probe.
            return Localized(gpu=None, component=None, kind=None,
                             evidence={"error": f"the probe failed: {err}"})
        if loc.gpu is not None:
            sus.rank = st.assignment.index(loc.gpu)
        return loc

    def _unlocalized(self, sus: Suspect, out: Outcome, loc: Localized, probe_s: float) -> None:
        """A straggler whose probe found no faulty part (its GPU and NIC measure healthy):
        nothing is excluded, the job restarts from its checkpoint on the same GPUs. A slow
        rank is not proof of a bad GPU (a noisy neighbour, a transient slowdown)."""
        st = self.state
        point = self._resume_point()
        ckpt_id, ckpt_step = point.id, point.step
        done = max((r.done_step for r in out.ranks), default=0)
        inc = IncidentPayload(
            job=st.job, attempt=st.attempt, symptom=sus.kind.value,
            rank=-1 if sus.candidates else sus.rank, fault_kind="", spare=None,
            component=f"job/{st.job}" if sus.candidates else st.assignment[sus.rank],
            evidence={**sus.evidence, "localize": loc.evidence}, detected_at=out.detected_at,
            detect_s=None, localize_s=round(probe_s, 4), stop_s=0.0, ckpt_id=ckpt_id,
            ckpt_step=ckpt_step, work_lost_steps=max(0, done - ckpt_step),
            host=socket.gethostname(), outcome="unlocalized")
        self.setup.recorder.incident(inc)

    def _check_command(self, out: Outcome) -> None:
        """Every rank failing with an error before any step is the command, not a GPU."""
        deadline = time.time() + 3.0
        codes = [p.poll() for p in self.procs]
        while any(c is None for c in codes) and time.time() < deadline:
            time.sleep(self.cfg.poll_s)
            codes = [p.poll() for p in self.procs]
        if all(c is not None and c > 0 for c in codes):
            stop_all(self.procs, self.cfg.stop_timeout_s)
            log = self.procs[0].log
            tail = log.read_text(errors="replace").strip().splitlines()[-5:] \
                if log.exists() else []
            self.state.rank_pids = []
            self.state.save(self.setup.job_dir)
            self._fail(f"the command failed on every rank before its first step (exit codes "
                       f"{codes}); nothing was excluded. Last lines of {log}:\n"
                       + "\n".join(tail), CommandFailed)

    def _finish_pending(self, ranks: list[RankBeats]) -> None:
        inc = self.pending
        if inc is None:
            return
        la = self.launched_at
        started = [r.started_at for r in ranks if r.started_at]
        restores = [r.restore_s for r in ranks if r.restore_s is not None]
        firsts = [r.first_step_at for r in ranks if r.first_step_at]
        got: dict[str, float] = {}
        if len(started) == len(ranks):
            got["start_s"] = round(max(started) - la, 4)
        if restores:
            got["restore_s"] = round(max(restores), 4)
        if len(firsts) == len(ranks):
            got["first_step_s"] = round(max(firsts) - la, 4)
            got["downtime_s"] = round(max(firsts) - (inc.detected_at or la), 4)
        self.setup.recorder.incident(inc.model_copy(update=got))
        self.pending = None

    def _resume_point(self) -> ResumePoint:
        """The job's newest checkpoint that verifies; each newer one passed over is said
        once (the job record and the operator), with why."""
        point = resume_point(self.tiers, self.verified)
        for cid, why in point.skipped.items():
            if cid in self.skipped_said:
                continue
            self.skipped_said.add(cid)
            msg = (f"job {self.state.job}: checkpoint {cid} skipped ({why}); resuming from "
                   f"{point.id or 'the start'}")
            self.note(msg)
            self.setup.recorder.job(self.state, "resumed" if self.state.attempt else "started",
                                    point.id, msg)
        return point

    def _stop_leftovers(self) -> None:
        """What an earlier supervisor of this job started and still runs (a supervisor killed
        with -9 cannot stop it; a command that forks past the death signal): killed by the
        ids recorded in the job's directory before anything starts. Then this supervisor
        and all it starts are recorded there. A supervisor of the job that still runs is
        refused: two would take each other's ranks for faults."""
        import signal

        record = self.setup.job_dir / owned.RECORD
        live = [p for p, role in owned.running(record, spare=owned.ancestry()).items()
                if role == "supervisor"]
        if live:
            raise UserError(f"job {self.state.job} is supervised already (pid {live[0]}, "
                            f"recorded in {record}); stop that one, or use another --job-dir")
        self._reap("left by an earlier supervisor")
        for pid in alive_ranks(self.state):  # a state written before the job kept a record
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        owned.add_record(record)
        owned.record(os.getpid(), "supervisor", group=False)

    def _reap(self, when: str) -> None:
        """Kill what the job's record holds that still runs (not this process); said."""
        record = self.setup.job_dir / owned.RECORD
        before = owned.running(record, spare=owned.ancestry())
        if not before:
            return
        left = owned.reap(record, self.cfg.stop_timeout_s)
        roles = sorted(set(before.values()))
        self.note(f"job {self.state.job}: stopped {len(before)} process(es) {when} "
                  f"({', '.join(roles)}, by the ids in {record})"
                  + (f"; {len(left)} did not stop: {sorted(left)}" if left else ""))

    def _fail(self, message: str, kind: type[UserError] = SparesExhausted) -> NoReturn:
        self.setup.recorder.job(self.state, "failed", None, message)
        raise kind(message)


def _detect_time(sus: Suspect, rb: RankBeats, out: Outcome) -> tuple[float | None, int | None]:
    if sus.kind is Symptom.STRAGGLER:
        steps = int(sus.evidence.get("consecutive", 0))
        first = rb.sync_at.get(int(sus.evidence.get("step", 0)) - steps + 1)
        return (round(out.detected_at - first, 4) if first else None), steps
    if rb.last_t is None:
        return None, None
    return round(out.detected_at - rb.last_t, 4), None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _step_time(ranks: list[RankBeats], suspect: int) -> float | None:
    """The median time between completed steps of the ranks that did not fail (the suspect's
    own steps are the slow or missing ones); None before two steps were seen."""
    gaps = []
    for rb in ranks:
        if rb.rank != suspect:
            at = sorted(rb.sync_at.items())
            gaps += [t1 - t0 for (s0, t0), (s1, t1) in itertools.pairwise(at)
                     if s1 == s0 + 1]
    return round(statistics.median(gaps), 6) if gaps else None
