"""The report's soak section: what a supervised job kept under a sustained fault schedule.

Every `recovery.soak` event (`rackscale job soak`) is listed, newest first: the job, the host
it ran on, when, the measured window, the schedule its faults were drawn from (failure model,
seed, fault count, rate scale), the ETTR with its 95% interval, goodput, badput by cause, and
per fault the time to detect it and the part named against the part injected. Every figure is
measured on the soak's host under its schedule, and each soak says so; the simulator's
predicted ETTR for the same schedule, when the event carries one, is shown beside it and
labelled simulated. Like the recovery section, it is computed from the events of the evidence
bundle's recovery.jsonl (the soak events are recovery events), so a verifier recomputes it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from rackscale.report import fmt
from rackscale.report.templates import macro
from rackscale.store import Kind

SOAK = Kind.RECOVERY_SOAK.value
LABEL = "measured under a sustained workload"
HOW = "rackscale job soak --lab DIR"
SCHEDULE_KEYS = ("file", "seed", "failure_model", "faults", "rate_scale")
FAULT_KEYS = ("index", "cause", "action", "component", "injected_at_s", "detected",
              "time_to_detect_s", "named", "named_vs_injected", "recovered", "badput_s")


def _dict(v: Any) -> dict[str, Any]:
    # A bundle is read from files a verifier did not write: a field that is not an object
    # reads as empty rather than stopping the recomputation with a TypeError.
    return v if isinstance(v, dict) else {}


def _sum(values: dict[str, Any]) -> float:
    return round(sum(float(v) for v in values.values() if isinstance(v, int | float)), 3)


def schedule_text(s: dict[str, Any]) -> str:
    """The schedule in words, as every label of a soak figure names it."""
    return (f"failure model {s.get('failure_model')}, seed {s.get('seed')}, "
            f"{s.get('faults')} faults, rates x{fmt.number(s.get('rate_scale'))}")


def _fault(f: dict[str, Any]) -> dict[str, Any]:
    row = {k: f.get(k) for k in FAULT_KEYS}
    return row | {"badput_total_s": _sum(_dict(f.get("badput_s")))}


def _predicted(p: Any) -> dict[str, Any] | None:
    """The simulator's prediction for the schedule, kept as the event has it and labelled
    simulated (it is never a measured figure, whatever else it carries)."""
    return None if not isinstance(p, dict) else p | {"basis": "simulated"}


def soak_row(ev: dict[str, Any]) -> dict[str, Any]:
    """One soak as report.json holds it, from its event (as the bundle holds it)."""
    p = _dict(ev.get("payload"))
    schedule = {k: _dict(p.get("schedule")).get(k) for k in SCHEDULE_KEYS}
    faults = [_fault(_dict(f)) for f in p.get("faults") or []]
    host, job = p.get("host") or "host not recorded", p.get("job")
    badput = _dict(p.get("badput_s"))
    return {
        "seq": ev.get("seq"), "time": ev.get("time"), "component": ev.get("component"),
        "job": job, "host": host, "lab": p.get("lab"), "window_s": p.get("window_s"),
        "clean_step_s": p.get("clean_step_s"), "schedule": schedule,
        "ettr": {k: _dict(p.get("ettr")).get(k) for k in ("value", "lo", "hi", "method")},
        "goodput": _dict(p.get("goodput")), "badput_s": badput,
        "badput_total_s": _sum(badput), "faults": faults,
        "faults_detected": sum(1 for f in faults if f["detected"]),
        "named_vs_injected": dict(Counter(str(f["named_vs_injected"]) for f in faults)),
        "load_avg": _dict(p.get("load_avg")),
        "measured": {"basis": "measured", "where": f"{host} (lab {p.get('lab')})",
                     "on": f"job {job}", "schedule": schedule_text(schedule)},
        "predicted": _predicted(p.get("predicted")),
    }


def soak_section(events: list[dict[str, Any]] | None) -> dict[str, Any]:
    """report.json's `soak`: `not_run` (with how to run one) without soak events, else every
    soak, newest first. `events`: event dicts as the bundle's recovery.jsonl holds them."""
    rows = [soak_row(e) for e in events or [] if e.get("kind") == SOAK]
    if not rows:
        return {"status": "not_run", "label": LABEL, "how": HOW}
    rows.sort(key=lambda r: r["seq"] if isinstance(r["seq"], int) else 0, reverse=True)
    return {"status": "measured", "label": LABEL, "soaks": rows,
            "hosts": sorted({str(r["host"]) for r in rows})}


# ------------------------------------------------------------------ the page
def _s(v: Any) -> str:
    return "—" if not isinstance(v, int | float) or isinstance(v, bool) else f"{float(v):.3f}"


def ettr_text(e: dict[str, Any]) -> str:
    """ETTR with its 95% interval, as the page and the statement write it."""
    return f"{fmt.number(e.get('value'))} {fmt.interval(e.get('lo'), e.get('hi'))}"


def predicted_text(p: dict[str, Any] | None) -> str | None:
    if p is None:
        return None
    return fmt.number(p.get("ettr"))


def _goodput(g: dict[str, Any]) -> str:
    slots = _dict(g.get("of_slots"))
    parts = [f"{fmt.number(g.get('kept_steps_per_s'))} kept steps/s of "
             f"{fmt.number(g.get('clean_steps_per_s'))} clean"]
    if slots:
        parts.append(f"{fmt.number(slots.get('value'))} "
                     f"{fmt.interval(slots.get('lo'), slots.get('hi'))} of the slots held")
    return "; ".join(parts)


def _named(n: Any) -> str:
    n = _dict(n)
    if not n:
        return "—"
    return f"{n.get('component')} ({n.get('kind')}, {n.get('symptom')})"


def _page_fault(f: dict[str, Any]) -> dict[str, Any]:
    return {"index": f["index"], "cause": f["cause"], "action": f["action"],
            "component": f["component"], "at": _s(f["injected_at_s"]),
            "detected": "yes" if f["detected"] else "no",
            "detect": _s(f["time_to_detect_s"]), "named": _named(f["named"]),
            "vs": f["named_vs_injected"], "recovered": "yes" if f["recovered"] else "no",
            "badput": _s(f["badput_total_s"])}


def _load(v: Any) -> str:
    # `job soak` records the 1, 5 and 15 minute load averages at the start and the end
    if isinstance(v, list):
        return " / ".join(fmt.number(x, 3) for x in v)
    return fmt.number(v, 3)


def _page_soak(r: dict[str, Any]) -> dict[str, Any]:
    return {"job": r["job"], "host": r["host"], "lab": r["lab"], "when": str(r["time"])[:19],
            "seq": r["seq"], "window": _s(r["window_s"]), "step": _s(r["clean_step_s"]),
            "schedule": r["schedule"], "schedule_text": r["measured"]["schedule"],
            "rate": fmt.number(r["schedule"]["rate_scale"]),
            "ettr": ettr_text(r["ettr"]), "method": r["ettr"]["method"] or "—",
            "predicted": predicted_text(r["predicted"]), "goodput": _goodput(r["goodput"]),
            "load": "; ".join(f"{k} {_load(v)}" for k, v in r["load_avg"].items()) or "—",
            "badput": [(k.replace("_", " "), _s(v)) for k, v in r["badput_s"].items()]
            + [("total", _s(r["badput_total_s"]))],
            "faults": [_page_fault(f) for f in r["faults"]],
            "named": ", ".join(f"{k} {v}" for k, v in r["named_vs_injected"].items()) or "—"}


def render_soak(section: dict[str, Any]) -> str:
    """HTML of the section (templates/soak.html): each soak labelled measured, with its host
    and its schedule; a prediction beside it labelled simulated."""
    if section.get("status") != "measured":
        return macro("soak.html", "not_run", section.get("how") or HOW)
    return macro("soak.html", "soak", {"hosts": "; ".join(section["hosts"]),
                                        "soaks": [_page_soak(r) for r in section["soaks"]]})


def statement_rows(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The statement block's lines: one per soak, newest first (its headline figures)."""
    if not section or section.get("status") != "measured":
        return []
    return [{"job": r["job"], "host": r["host"], "when": str(r["time"])[:19],
             "schedule": r["measured"]["schedule"], "ettr": ettr_text(r["ettr"]),
             "predicted": predicted_text(r["predicted"])} for r in section["soaks"]]
