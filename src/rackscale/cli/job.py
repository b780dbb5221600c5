"""`rackscale job`: run a distributed training job under the supervisor, the reference
trainer, and the incidents of past recoveries."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from rackscale.cli._common import DbOption, JsonOption, emit_json, err_console, noun, plain, say
from rackscale.errors import UserError
from rackscale.owned import ends_cleanly

if TYPE_CHECKING:
    from rackscale.fleet import Topology
    from rackscale.recovery import CoolingConditions, Site
    from rackscale.soak import Schedule
    from rackscale.store import Store

app = noun("Supervise a distributed training job: detect faults, exclude, resume on a spare.")

JobDirOption = typer.Option(
    Path("rackscale-data/jobs/job"), "--job-dir", metavar="DIR",
    help="The job's directory: its state, heartbeats, logs, incidents and (by default) its "
    "checkpoint tiers. Run again on the same directory to resume the job.")
CkptEveryOption = typer.Option(10, "--ckpt-every", min=1,
                               help="Checkpoint every N steps (passed to the ranks).")
StepsOption = typer.Option(100, "--steps", min=1, help="Training steps of the job.")
SpareWaitOption = typer.Option(0.0, "--spare-wait-s", min=0, max=86_400, help="A recovery "
                               "short of spares waits this long for repaired slots to rejoin "
                               "before the job stops (0: it stops at once).")
RunCkptEveryOption = typer.Option(
    None, "--ckpt-every", min=1, show_default=False, help="Checkpoint every N steps (passed "
    "to the ranks). Default: chosen as the job runs, sqrt(2 x measured save cost x MTBF) "
    "(Young/Daly), said with its inputs (train-demo; another command gets the MTBF).")
MtbfOption = typer.Option(None, "--mtbf-h", min=0.001, show_default=False, help="The job's "
                          "mean time between failures, hours, for the checkpoint interval. "
                          "Default: the llama3 failure model's rate for --job-gpus GPUs.")


class Timing(StrEnum):
    """What a demo rank reports as its compute time (DemoSettings.timing)."""

    cpu = "cpu"
    wall = "wall"


def check_job_dir(job_dir: Path, *, must_exist: bool = False) -> Path:
    """`--job-dir` is a directory (or, unless `must_exist`, a path one can be made at)."""
    from rackscale.cli._common import check_out_dir
    from rackscale.errors import UserError

    if job_dir.exists() and not job_dir.is_dir():
        raise UserError(f"--job-dir {job_dir}: is a file; give the job's directory (the one "
                        "`rackscale job run --job-dir DIR` wrote)")
    if must_exist and not job_dir.exists():
        raise UserError(f"--job-dir {job_dir}: no such directory; give the directory of a job "
                        "`rackscale job run --job-dir DIR` ran (default rackscale-data/jobs/"
                        "job), or omit --job-dir to read the store (--db)")
    if not must_exist:
        check_out_dir(job_dir, "--job-dir")
    return job_dir


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw and raw.isdigit() else default


@app.command("train-demo")
def train_demo(
    steps: int = typer.Option(None, "--steps", min=1, show_default=False,
                              help="Training steps (default: $RACKSCALE_STEPS, else 100)."),
    ckpt_every: int = typer.Option(None, "--ckpt-every", min=1, show_default=False,
                                   help="Checkpoint every N steps (default: "
                                   "$RACKSCALE_CKPT_EVERY, else 10)."),
    width: int = typer.Option(256, "--width", min=1, help="Hidden width of the MLP."),
    depth: int = typer.Option(3, "--depth", min=1, help="Hidden layers of the MLP."),
    batch: int = typer.Option(64, "--batch", min=1, help="Samples per rank and step."),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed of the model and data "
                             "(same seed, same result)."),
    pace_s: float = typer.Option(0.0, "--pace-s", min=0.0, help="Idle seconds added to each "
                                 "step (a longer step, for drills)."),
    slow_slot: str = typer.Option(None, "--slow-slot", metavar="GPU", show_default=False,
                                  help="Drill: the rank on this GPU slot computes slower."),
    slow_factor: float = typer.Option(1.0, "--slow-factor", min=1.0,
                                      help="Drill: how much slower (1.5 = 1.5x the time)."),
    slow_from: int = typer.Option(1, "--slow-from", min=1,
                                  help="Drill: the first slow step (a part that degrades)."),
    timing: Timing = typer.Option(Timing.cpu, "--timing", metavar="TEXT",
                                  help="What a rank reports as a step's compute time: cpu (its "
                               "own CPU time) or wall (on the lab, where a CPU quota stands "
                               "for a slow GPU)."),
    job_dir: Path = JobDirOption,
) -> None:
    """The reference trainer: a small MLP on synthetic data, gloo data-parallel, checkpoints
    through the tiered store; deterministic on CPU. One rank per process (run it under
    `rackscale job run`, or alone as a one-rank job)."""
    from rackscale.recovery import DemoSettings, RankEnv, train, wait_for_rank

    # No --ckpt-every under a supervisor that gives an MTBF: chosen as the job runs
    chosen = None if os.environ.get("RACKSCALE_MTBF_S") else 10
    s = DemoSettings(steps=steps or _env_int("RACKSCALE_STEPS", 100),
                     ckpt_every=ckpt_every or _env_int("RACKSCALE_CKPT_EVERY", 0) or chosen,
                     width=width, depth=depth, batch=batch, seed=seed, pace_s=pace_s,
                     slow_slot=slow_slot, slow_factor=slow_factor, slow_from=slow_from,
                     timing=timing.value)
    job_dir.mkdir(parents=True, exist_ok=True)
    wait_for_rank()  # a standby (`job run`, unless --cold) waits here for its rank
    result = train(s, RankEnv.from_environ(str(job_dir)))
    if result and os.environ.get("RANK", "0") == "0":
        say(f"trained {result['steps']} steps; params sha256 {result['params_sha256'][:16]}")


@app.command("run", options_metavar="[OPTIONS] -- CMD [ARGS]...",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    ctx: typer.Context,
    runner: str = typer.Option("local", "--runner", help="Where ranks run: local (processes "
                               "on this host), lab (the lab's namespaces, see --lab) or "
                               "slurm (one srun step per rank)."),
    lab_dir: Path | None = typer.Option(None, "--lab", metavar="DIR", show_default=False,
                                        help="The lab's state directory (--runner lab; "
                                        "default rackscale-data/lab)."),
    gpus: int = typer.Option(..., "--job-gpus", min=1, help="Ranks of the job (one per GPU)."),
    spares: int = typer.Option(0, "--spares", min=0, help="Hot spare GPU slots."),
    ckpt_every: int | None = RunCkptEveryOption,
    mtbf_h: float | None = MtbfOption,
    steps: int = StepsOption,
    job_dir: Path = JobDirOption,
    config: Path = typer.Option(None, "--config", metavar="FILE", show_default=False,
                                help="Tiers config (YAML/JSON); default: directories under "
                                "--job-dir."),
    hang_floor_s: float = typer.Option(10.0, "--hang-floor-s", min=0.01,
                                       help="Shortest hang timeout once learned."),
    startup_timeout_s: float = typer.Option(120.0, "--startup-timeout-s", min=0.01,
                                            help="Hang timeout until a rank's first steps."),
    straggler_threshold: float = typer.Option(0.75, "--straggler-threshold", min=0.01,
                                              max=0.99, help="A rank scoring under this "
                                              "against the others' median is slow."),
    straggler_steps: int = typer.Option(5, "--straggler-steps", min=1,
                                        help="Consecutive slow steps that make a straggler."),
    max_restarts: int = typer.Option(10, "--max-restarts", min=0,
                                     help="Give up after this many restarts."),
    spare_wait_s: float = SpareWaitOption,
    warm: bool | None = typer.Option(
        None, "--warm/--cold", show_default=False, help="Keep a standby process per GPU slot, "
        "started ahead with its imports done, so a restart skips the process start; --cold "
        "starts each rank afresh. Default: warm with --runner local and lab, cold with slurm "
        "(a standby there would be a job step holding its GPU next to the rank). Standbys "
        "start once a rank shows the command takes them (train-demo does)."),
    db: str = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Launch CMD (and its ARGS, after `--`: `-- rackscale job train-demo`) as GPUS ranks
    and keep it alive. A crashed, hung or slow rank is excluded, a spare takes its place,
    every rank resumes from the latest committed checkpoint; findings and incidents are
    recorded in the store (--db) and in the job directory. Exit 0 when the job finished; 2
    when it cannot go on (no spare left, a command that fails everywhere, an unreachable
    store); every checkpoint is kept."""
    from rackscale.recovery import Supervisor, build_setup, make_job_config
    from rackscale.store import default_db_url

    command = list(ctx.args)
    if not command:
        raise UserError("no command: give the job's command after `--`, e.g. "
                        "`rackscale job run --job-gpus 2 -- rackscale job train-demo`")
    cfg = make_job_config(command=command, gpus=gpus, spares=spares, ckpt_every=ckpt_every or 10,
                          steps=steps, max_restarts=max_restarts, warm=_warm(runner, warm),
                          spare_wait_s=spare_wait_s,
                          detect={"hang_floor_s": hang_floor_s,
                                  "startup_timeout_s": startup_timeout_s,
                                  "straggler_threshold": straggler_threshold,
                                  "straggler_steps": straggler_steps})
    check_job_dir(job_dir)
    os.environ.update(_cadence_env(ckpt_every, mtbf_h, gpus), RACKSCALE_STEPS=str(steps))
    db = db or default_db_url()  # the store `lifecycle` and `job incidents` read
    setup = build_setup(runner=runner, job_dir=job_dir, slots=gpus + spares, config=config,
                        db=db, site=_site(runner, lab_dir, db))
    notes: list[str] = []
    def note(message: str) -> None:  # as it happens, so a long job says it at once
        notes.append(message)
        err_console.print(f"[yellow]{escape(message)}[/]", soft_wrap=True)

    with ends_cleanly():  # SIGTERM stops the ranks and standbys as Ctrl-C does
        state = Supervisor(cfg, setup, note=note).run()
    summary = {"job": state.job, "job_id": state.job_id, "finished": state.finished,
               "attempts": state.attempt, "excluded": state.excluded,
               "spares_left": state.spares, "assignment": state.assignment, "notes": notes}
    if as_json:
        emit_json(summary)
        return
    say(f"job {state.job}: finished after {state.attempt} attempt(s); excluded: "
        f"{', '.join(state.excluded) or 'none'}")


def _cadence_env(ckpt_every: int | None, mtbf_h: float | None, gpus: int) -> dict[str, str]:
    """What the ranks get for their checkpoint cadence: --ckpt-every, or the MTBF the
    interval is chosen from (cadence.py), with where it came from."""
    if ckpt_every is not None:
        return {"RACKSCALE_CKPT_EVERY": str(ckpt_every)}
    if mtbf_h is not None:
        return {"RACKSCALE_MTBF_S": str(mtbf_h * 3600), "RACKSCALE_MTBF_FROM": "--mtbf-h"}
    from rackscale.simulate import failure_model

    m = failure_model("llama3")
    return {"RACKSCALE_MTBF_S": str(3600 / (m.rate_per_gpu_h * gpus)),
            "RACKSCALE_MTBF_FROM": f"the {m.name} failure model ({m.source}): "
            f"{m.rate_per_gpu_h:.3g} interruptions per GPU-hour x {gpus} GPUs"}


def _warm(runner: str, asked: bool | None) -> bool:
    """Standbys unless --cold, or the runner cannot keep them (then --warm is refused)."""
    from rackscale.errors import UserError
    from rackscale.recovery import RUNNERS

    why = RUNNERS[runner].no_standbys
    if asked and why is not None:  # kept on, the job would run cold without a word
        raise UserError(f"--warm with --runner {runner}: {why}. Fix: drop --warm")
    return why is None if asked is None else asked


def _site(runner: str, lab_dir: Path | None, db: str) -> Site | None:
    """The GPUs a runner places ranks on when they are not this host's: the lab's."""
    from rackscale.errors import UserError
    from rackscale.recovery import RUNNERS, Site

    if RUNNERS[runner].site != "--lab":
        if lab_dir is not None:  # ignored, the job would run off the lab without a word
            raise UserError(f"--lab {lab_dir} applies to --runner lab only; --runner "
                            f"{runner} does not run in a lab. Fix: add --runner lab, or drop "
                            "--lab")
        return None
    from rackscale import lab
    from rackscale.cli.certify_real import lab_placement
    from rackscale.cli.fleet import resolve_spec
    from rackscale.fleet import Topology

    lab_dir = lab_dir or lab.DEFAULT_STATE_DIR
    st = lab.require_up(lab_dir, f"--runner {runner}")
    topo = Topology.build(resolve_spec(st.data["fleet_file"], None))
    placement = lab_placement(topo, lab_dir)
    if placement is None:  # the state vanished between the two reads
        raise UserError(f"--runner {runner}: the lab in {lab_dir} went away; "
                        f"`rackscale lab up --lab {lab_dir}`")
    from rackscale.lifecycle import enrolled_racks
    from rackscale.store import Store

    store = Store(db)
    racks = {r.id for r in topo.racks}
    cooling = lifecycle_cooling(store, racks) if enrolled_racks(store, racks) == racks \
        else lab_cooling(lab_dir, topo)
    return Site(topo=topo, placement=placement, cooling=cooling)


def lifecycle_cooling(store: Store, racks: set[str]) -> CoolingConditions:
    """The hot racks as the lifecycle's coolant-fault response has them (read at each ask),
    when the lifecycle in the job's store knows every rack of the lab: it owns the response,
    and a rack at its drain tier makes the job leave it (`drain`)."""
    from rackscale.lifecycle import coolant_conditions

    return lambda: coolant_conditions(store, racks)


def lab_cooling(lab_dir: Path, topo: Topology) -> CoolingConditions:
    """The lab's hot racks for the supervisor, when no lifecycle knows the lab's racks: each
    rack whose CDU has a `coolant_flow_low` fault present, with its flow (the lowest, when
    several), read from the lab's state each time it is asked (faults come and go while the
    job runs). Here, not in the recovery room, which may not import the lab. The rack is the
    CDU's holder in the fleet's topology; the lab has no cooling loop, so the flow is the
    fault's severity: simulated. No rack is drained this way: nothing here runs the tiers."""
    from rackscale import lab
    from rackscale.faults import COOLANT_FLOW_LOW
    from rackscale.fleet import CDU

    def hot() -> dict[str, dict[str, Any]]:
        st = lab.load_state(lab_dir)
        by_rack: dict[str, list[dict[str, Any]]] = {}
        for f in st.faults if st is not None else []:  # a lab taken down holds no fault
            if f["kind"] != COOLANT_FLOW_LOW:  # a flapping flow is no steady condition
                continue
            where = topo.holder(f["target"])  # an unknown part: UserError, said by the job
            if where.kind == CDU and where.rack is not None:  # the lab injects no other
                by_rack.setdefault(where.rack, []).append(f)
        return {rack: {"cdu": fs[0]["target"], "basis": "simulated",
                       "flow": min((f["severity"] for f in fs if f.get("severity") is not None),
                                   default=None),
                       "why": fs[0].get("simulated", "the lab has no cooling loop")}
                for rack, fs in by_rack.items()}

    return hot


@app.command("incidents")
def incidents(
    job_dir: Path = typer.Option(None, "--job-dir", metavar="DIR", show_default=False,
                                 help="Read the job directory's copy instead of the store."),
    db: str = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Recoveries of supervised jobs, each phase's time measured on the run."""
    from rich.table import Table

    from rackscale.cli._common import console
    from rackscale.recovery import read_incidents
    from rackscale.store import Store

    if job_dir is not None:
        check_job_dir(job_dir, must_exist=True)
    store = None if job_dir is not None else Store(db, readonly=True)
    rows = read_incidents(job_dir=job_dir, store=store)
    if as_json:
        emit_json({"incidents": rows, "measured": True})
        return
    if not rows:
        where = (f"{job_dir / 'incidents.jsonl'}" if store is None
                 else f"the store {store.safe_url}")
        tail = "" if store is None else "; a job's own copy is read with --job-dir DIR"
        say(f"no recovery incidents in {where}. A supervised job records one each time it "
            "replaces a rank: `rackscale job run --job-gpus 2 --spares 1 -- rackscale job "
            f"train-demo` (see docs/recovery.md){tail}")
        return
    t = Table(title="recovery incidents (measured)")
    for col in ("job", "attempt", "symptom", "component", "spare", "detect s", "restart s",
                "restore s", "first step s", "lost steps", "outcome"):
        t.add_column(col)
    for r in rows:
        t.add_row(*(plain("-" if r.get(k) is None else r.get(k)) for k in (
            "job", "attempt", "symptom", "component", "spare", "detect_s", "restart_s",
            "restore_s", "first_step_s", "work_lost_steps", "outcome")))
    console.print(t)


QUICK_MIN, QUICK_FAULTS = 4.0, 3


@app.command("soak", options_metavar="[OPTIONS] [-- CMD [ARGS]...]",
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def soak(
    ctx: typer.Context,
    lab_dir: Path = typer.Option(None, "--lab", metavar="DIR", show_default=False,
                                 help="The lab's state directory; the lab must be up "
                                 "(default rackscale-data/lab)."),
    duration: float = typer.Option(20.0, "--duration-min", min=0.5, help="Minutes the soak runs "
                                   "(from the job's launch to its stop)."),
    quick: bool = typer.Option(False, "--quick", help=f"About {QUICK_MIN:.0f} minutes and "
                               f"{QUICK_FAULTS} faults (overrides --duration-min and "
                               "--fault-count)."),
    fault_count: int = typer.Option(4, "--fault-count", min=0, help="Faults the soak injects: "
                                    "the failure model's rates are scaled to expect this many."),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the fault schedule."),
    failure_model: str = typer.Option("llama3", "--failure-model",
                                      help="The simulator's failure model the schedule is "
                                      "drawn from."),
    kinds: str = typer.Option(None, "--kinds", show_default=False, help="Draw only the "
                              "causes of these fault kinds (comma-separated: gpu_dead, "
                              "slow_gpu, bad_cable, nic_dead, coolant_flow_low, software, host)."),
    cooling_ratio: float = typer.Option(0.0, "--cooling-ratio", min=0.0, help="Rack cooling "
                                        "faults (coolant_flow_low on a rack's CDU, its flow "
                                        "simulated) at this fraction of the fail-stop rate; "
                                        "the published failure models count none."),
    schedule: Path = typer.Option(None, "--schedule", metavar="FILE", show_default=False,
                                  help="Run this schedule (the schedule.json of an earlier "
                                  "soak) instead of drawing one; --fault-count, --seed, "
                                  "--duration-min, --kinds and --repair-s are then the file's."),
    repair_s: float = typer.Option(25.0, "--repair-s", min=1.0, help="Seconds each fault is "
                                   "held before the lab lifts it (its repair)."),
    gpus: int = typer.Option(4, "--job-gpus", min=1, help="Ranks of the job (one per GPU)."),
    spares: int = typer.Option(4, "--spares", min=0, help="Hot spare GPU slots."),
    ckpt_every: int = CkptEveryOption,
    config: Path = typer.Option(None, "--config", metavar="FILE", show_default=False,
                                help="Tiers config (YAML/JSON) the job checkpoints through "
                                "(job run --config); default: directories under the job's "
                                "directory, local cache on. Recorded in soak.json."),
    out: Path = typer.Option(Path("rackscale-data/soaks/soak"), "--out", metavar="DIR",
                             help="A new directory for the soak: schedule.json, "
                             "progress.jsonl, job/, soak.json."),
    db: str = DbOption,
    as_json: bool = JsonOption,
) -> None:
    """Run a supervised training job on the lab for a while, under faults drawn from the
    simulator's failure model and injected for real (each lifted after its repair time), and
    measure what survives: ETTR and goodput with their 95% interval, badput by cause per
    incident and in total, each fault's time to detect and the part named against the part
    injected. The schedule is written before the job starts; the result goes to --out and,
    as a recovery.soak event, to the store. The job is `job train-demo`'s trainer unless a
    command is given after `--`."""
    from rackscale import lab
    from rackscale.cli._common import check_out_dir
    from rackscale.simulate import failure_model as get_model
    from rackscale.soak import Soak, SoakSettings, draw, record_soak
    from rackscale.store import Store, default_db_url

    check_out_dir(out, "--out")
    if quick:
        duration, fault_count = QUICK_MIN, QUICK_FAULTS
    _check_soak(config, schedule, fault_count, spares)
    lab_dir = lab_dir or lab.DEFAULT_STATE_DIR
    lab.require_up(lab_dir, "job soak")
    if schedule is not None:
        sched = _read_schedule(schedule, gpus)
    else:
        wanted = tuple(k.strip() for k in kinds.split(",") if k.strip()) if kinds else None
        sched = draw(get_model(failure_model), count=fault_count, gpus=gpus,
                     duration_s=duration * 60, seed=seed, repair_s=repair_s, kinds=wanted,
                     cooling_ratio=cooling_ratio)
    url = db or default_db_url()
    settings = SoakSettings(lab_dir=lab_dir, out=out, schedule=sched, spares=spares, db=url,
                            ckpt_every=ckpt_every, command=list(ctx.args), config=config)
    with ends_cleanly():  # SIGTERM lifts the faults and stops the job as Ctrl-C does
        result = _soak_with_bar(Soak(settings), disable=as_json)
    result["event_seq"] = record_soak(Store(url), result)
    if as_json:
        emit_json(result)
        return
    _say_soak(result)


def _check_soak(config: Path | None, schedule: Path | None, fault_count: int,
                spares: int) -> None:
    """What `job soak` refuses before the lab is asked: a missing or bad tiers config, more
    faults than spares."""
    from rackscale.checkpoint import load_config
    from rackscale.errors import UserError

    if config is not None:
        load_config(config)
    if schedule is None and fault_count > spares:
        raise UserError(f"--fault-count {fault_count} with --spares {spares}: each fault the "
                        "supervisor excludes takes a spare, and a repaired part rejoins only "
                        "once its certification passes; give at least as many spares as "
                        "faults")


def _read_schedule(path: Path, gpus: int) -> Schedule:
    import json

    from rackscale.errors import UserError
    from rackscale.soak import from_dict

    try:
        sched = from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as err:
        raise UserError(f"--schedule {path}: cannot read it as JSON ({err}); give the "
                        "schedule.json of an earlier soak") from None
    if sched.gpus != gpus:
        raise UserError(f"--schedule {path} is for a job of {sched.gpus} GPUs; give --job-gpus "
                        f"{sched.gpus}")
    return sched


def _soak_with_bar(s: object, *, disable: bool) -> dict[str, Any]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from rackscale.cli._common import console
    from rackscale.soak import Soak

    assert isinstance(s, Soak)
    with Progress(TextColumn("[bold]soak[/]"), BarColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=console, transient=True,
                  disable=disable) as bar:
        task = bar.add_task("starting the job", total=s.s.schedule.duration_s)

        def show(snap: dict[str, Any]) -> None:
            bar.update(task, completed=snap["elapsed_s"], description=(
                f"step {snap['step']}, attempt {snap['attempt']}, faults {snap['injected']}/"
                f"{s.s.schedule.count} ({snap['present']} present), excluded "
                f"{len(snap['excluded'])}"))

        s.progress = show
        return s.run()


def _say_soak(r: dict[str, Any]) -> None:
    from rich.table import Table

    from rackscale.cli._common import console

    e, g = r["ettr"], r["goodput"]["of_slots"]
    la = r["load_avg"]
    say(f"soak on {r['host']} (measured; load average {la['start'][0]:.2f} at the start, "
        f"{la['end'][0]:.2f} at the end), schedule {r['schedule']['file']} (seed "
        f"{r['schedule']['seed']}, {r['schedule']['failure_model']} rates x"
        f"{r['schedule']['rate_scale']:.3g})")
    say(f"ETTR {e['value']:.3f} (95% {e['lo']:.3f}..{e['hi']:.3f}, measured over "
        f"{r['window_s']:.0f} s); goodput {g['value']:.3f} of the slots held "
        f"({g['lo']:.3f}..{g['hi']:.3f}); {r['steps_kept']} steps kept, {r['steps_lost']} "
        f"lost, clean step {r['clean_step_s']:.3f} s")
    t = Table(title="faults (measured)")
    for col in ("#", "cause", "injected", "part", "detect s", "named", "match", "recovered",
                "badput s", "recertified"):
        t.add_column(col)
    for f in r["faults"]:
        named = f["named"] or {}
        t.add_row(str(f["index"]), plain(f["cause"]), plain(f["action"]), plain(f["component"]),
                  plain("-" if f["time_to_detect_s"] is None else f["time_to_detect_s"]),
                  plain(f"{named.get('component', '-')} {named.get('kind') or ''}".strip()),
                  plain(f["named_vs_injected"]), "yes" if f["recovered"] else "no",
                  f"{sum(f['badput_s'].values()):.1f}", plain(_recertified(f)))
    console.print(t)
    for rack, states in _rack_paths(r).items():
        say(f"lifecycle of {rack} (plant simulated): {' -> '.join(states)}")
    life = r.get("lifecycle", {})
    if life.get("states"):
        say("lifecycle at the end (plant simulated): " + ", ".join(
            f"{rack} {state}" for rack, state in sorted(life["states"].items())))
    waiting = [s for slots in life.get("returns_waiting", []) for s in slots]
    if waiting:
        say(f"{len(waiting)} slot(s) recertified but not served by the lifecycle by the end, "
            f"so not returned to the job: {', '.join(waiting)}")
    _family_table(r)
    b = Table(title="badput by cause, s (measured)")
    b.add_column("cause")
    b.add_column("s")
    for k, v in r["badput_s"].items():
        b.add_row(k, f"{v:.1f}")
    console.print(b)
    _say_predicted(r)
    say(f"written: {Path(r['schedule']['file']).parent / 'soak.json'}; store event "
        f"recovery.soak #{r['event_seq']}")


def _family_table(r: dict[str, Any]) -> None:
    """Each fault family's recovery steps, mean seconds over its faults (measured), and the
    simulator inputs its class feeds."""
    from rich.table import Table

    from rackscale.cli._common import console
    from rackscale.soak import RECOVERY_STEPS, by_family, step_cells

    fams = by_family(r)
    if not fams:
        return
    t = Table(title="recovery by fault family, mean s (measured; - none measured)")
    for col in ("family", "faults", *(k.removesuffix("_s") for k in RECOVERY_STEPS), "feeds"):
        t.add_column(col)
    for fam, row in fams.items():
        t.add_row(fam, ",".join(f"#{i}" for i in row["faults"]), *step_cells(row),
                  f"{row['sim_class']}: {row['feeds']}")
    console.print(t)


def _recertified(f: dict[str, Any]) -> str:
    rc = f.get("recertified")
    if not rc:
        return "-"
    verdict = "passed" if rc["passed"] else f"failed ({rc.get('why', '')})"
    back = f", {len(rc['returned'])} slot(s) back" if rc.get("returned") else ""
    return f"{rc['scope']} {verdict}{back}"


def _rack_paths(r: dict[str, Any]) -> dict[str, list[str]]:
    """Each rack's states in the soak, for racks that left production at some point."""
    paths: dict[str, list[str]] = {}
    for t in r.get("lifecycle", {}).get("transitions", []):
        paths.setdefault(t["rack"], []).append(t["to"])
    return {k: v for k, v in paths.items() if len(v) > 1}


def _say_predicted(r: dict[str, Any]) -> None:
    from rackscale.soak import verdict

    if not r.get("predicted"):
        return
    v = verdict(r, r["predicted"])
    if v["predicted"] is None:
        say(f"predicted ETTR (simulated): none ({v['why']})")
        return
    where = "inside" if v["inside"] else "outside"
    say(f"predicted ETTR (simulated) {v['predicted']:.3f} vs measured {v['measured']:.3f} "
        f"[{v['lo']:.3f}, {v['hi']:.3f}]: {where} the interval, difference "
        f"{v['difference_pp']:+.1f} pp")
    _inputs_table(r["predicted"].get("inputs") or {})


def _inputs_table(inputs: dict[str, Any]) -> None:
    """Every figure the prediction was fed: its value, and measured in this soak (where),
    taken from the schedule, or assumed (from what)."""
    from rich.table import Table

    from rackscale.cli._common import console

    t = Table(title="prediction inputs (fed to the simulator)")
    for col in ("input", "value", "basis", "from"):
        t.add_column(col)
    for name, fed in inputs.items():
        if not isinstance(fed, dict):
            continue
        value = fed.get("value")
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        t.add_row(plain(name), plain(shown), plain(str(fed.get("basis", ""))),
                  plain(str(fed.get("from", ""))))
    console.print(t)
