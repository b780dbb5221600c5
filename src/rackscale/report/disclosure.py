"""The disclosure: what a buyer asks of a usable-capacity statement, in one versioned document.

headline -> usable ledger with reasons; sustained multi-rack performance per scope (bus
bandwidth measured against the spec, NVLink on and off); failure recovery; the ETTR measured
under a sustained workload (soaks under a fault schedule); storage (per-tier
RPO, restore latency); the cost of each loss when a price is given. Every figure carries its
provenance: measured (where, on what) or simulated (seed, model), or what else it rests on.
It is derived from report.json and the evidence bundle only, so a verifier rebuilds it and
compares. Its JSON Schema is disclosure.schema.json (package data), version DISCLOSURE_VERSION.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from rackscale.fleet import GPUS, TEMPLATES
from rackscale.report.simulation import read_simulation
from rackscale.store import CertifyRunV1, InvalidPayload, SimulateRunV1, carried_payload

DISCLOSURE_VERSION = "rackscale.disclosure/1"


def _simulation(sim: dict[str, Any]) -> SimulateRunV1 | None:
    """The report's simulation section as its typed simulate.run; None when not run or not
    applied (a payload that does not fit its contract: the report's warnings say which
    field)."""
    if sim["status"] != "ran":
        return None
    run = read_simulation(sim)
    return None if isinstance(run, InvalidPayload) else run


@cache
def disclosure_schema() -> dict[str, Any]:
    text = resources.files("rackscale.report").joinpath("disclosure.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)  # the package's own schema: an object
    return schema


def validate_disclosure(doc: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when `doc` does not match the published schema."""
    import jsonschema

    jsonschema.validate(doc, disclosure_schema())


def _provenance(basis: str, prov: dict[str, Any], *, fleet: str, model: str,
                source: str) -> dict[str, Any]:
    if basis == "measured":
        return {"basis": "measured", "where": f"run {prov.get('run_id', '?')} "
                f"({prov.get('backend') or 'real hardware'})", "on": fleet}
    if basis == "simulated":
        seed = prov.get("seed")
        return {"basis": "simulated", "seed": seed if isinstance(seed, int) else None,
                "model": model}
    return {"basis": basis, "source": source}


def _step_model(step: dict[str, Any]) -> str:
    prov = step["provenance"]
    if step["key"] == "goodput":
        return f"fleet simulator, failure model {prov.get('failure_model', '?')}"
    if prov.get("faults_file"):
        return f"digital twin with faults file {prov['faults_file']}"
    return "digital twin"


def _ledger(doc: dict[str, Any]) -> list[dict[str, Any]]:
    fleet = doc["fleet"]["fleet"]
    reasons = doc["reasons"]
    return [{"step": s["key"], "label": s["label"], "gpus": s["count"], "ci95": s["ci95"],
             "lost": [{"reason": k, "gpus": v, "why": reasons.get(k, k)}
                      for k, v in s["lost"].items()],
             "provenance": _provenance(s["basis"], s["provenance"], fleet=fleet,
                                       model=_step_model(s), source=s["source"])}
            for s in doc["ledger"]]


def _spec_nvlink(doc: dict[str, Any]) -> dict[str, Any]:
    skus = sorted({TEMPLATES[t].gpu for t in doc["fleet"]["per_rack_template"]
                   if t in TEMPLATES})
    return {"nvlink_gbps_per_gpu": {s: GPUS[s].nvlink_gbps for s in skus if s in GPUS},
            "source": "; ".join(f"{s}: {GPUS[s].source}" for s in skus if s in GPUS)}


def _performance(doc: dict[str, Any]) -> dict[str, Any]:
    cert = doc["certification"]
    run = carried_payload(cert, CertifyRunV1) if cert["status"] == "ran" else None
    fabric = run.fabric if run is not None else None
    if not fabric or run is None:
        return {"status": "not_run", "scopes": [], "spec": _spec_nvlink(doc)}
    payload = run.dump()  # the run's provenance fields as stored (run_id, backend, seed)
    scopes = []
    for f in fabric:
        basis = "measured" if f.get("measured") else "simulated"
        scopes.append({
            "scope": str(f.get("scope")), "gpus": f.get("gpus"),
            "nvlink_on": {"busbw_gbps": f.get("nvlink_on_busbw"),
                          "expected_gbps": f.get("nvlink_on_expected")},
            "nvlink_off": {"busbw_gbps": f.get("nvlink_off_busbw")},
            "shortfall": f.get("shortfall"),
            "provenance": _provenance(basis, payload, fleet=str(f.get("scope")),
                                      model=_step_model({"key": "", "provenance": payload}),
                                      source="")})
    return {"status": "ran", "scopes": scopes, "spec": _spec_nvlink(doc),
            "how": "all-reduce bus bandwidth (nccl-tests busbw) of each multi-rack scope, "
                   "NVLink on and off; expected = the model's figure at the links' rates"}


# The disclosure's name for each field of an incident row of report.json's recovery section
# (rackscale.incidents.incident_row owns the row; the disclosure publishes it under these).
_RECOVERY_FIELDS = {"kind": "symptom", "component": "component", "job": "job",
                    "fault_kind": "fault_kind", "outcome": "outcome",
                    "time_to_detect_s": "detect_s", "time_to_localize_s": "localize_s",
                    "time_to_restart_s": "restart_s", "time_to_restore_s": "restore_s",
                    "time_to_first_step_s": "first_step_s", "downtime_s": "downtime_s",
                    "work_lost_steps": "work_lost_steps", "provenance": "measured"}


def _recovery(doc: dict[str, Any]) -> dict[str, Any]:
    """Measured incidents from report.json's recovery section (itself computed from the
    bundle's recovery.jsonl), beside the simulator's failure figures."""
    rows = (doc.get("recovery") or {}).get("incidents") or []
    measured = [{k: r[v] for k, v in _RECOVERY_FIELDS.items()}
                | {"work_lost_s": r["badput_s"]["lost_work"]} for r in rows]
    sim = doc["simulation"]
    simulated = None
    if (run := _simulation(sim)) is not None:
        simulated = {"job_mttf_h": run.job_mttf_h,
                     "lost_hours_by_cause": run.lost_hours_by_cause,
                     "interruptions_by_cause": run.interruptions_by_cause,
                     "provenance": {"basis": "simulated", "seed": run.seed,
                                    "model": f"fleet simulator, failure model "
                                             f"{run.failure_model}"}}
    status = "measured" if measured else ("simulated" if simulated else "not_run")
    return {"status": status, "incidents": measured, "simulated": simulated}


def _soak_predicted(r: dict[str, Any]) -> dict[str, Any] | None:
    p = r.get("predicted")
    if not isinstance(p, dict):
        return None
    # the prediction's own seed when it names one; the schedule's seed drew the faults, not
    # necessarily the simulator's trials, so it is not borrowed
    seed = p.get("seed")
    return {"ettr": p.get("ettr"),
            "provenance": {"basis": "simulated", "seed": seed if isinstance(seed, int) else None,
                           "model": f"fleet simulator, failure model "
                                    f"{r['schedule']['failure_model']}, the soak's schedule"}}


def _soak(doc: dict[str, Any]) -> dict[str, Any]:
    """The soaks of report.json's soak section (itself computed from the bundle's
    recovery.jsonl): each one's headline figures, measured on its host under its schedule,
    and the simulator's prediction for that schedule when there is one."""
    sec = doc.get("soak") or {}
    if sec.get("status") != "measured":
        return {"status": "not_run", "soaks": []}
    rows = [{"job": r["job"], "when": r["time"], "host": r["host"], "window_s": r["window_s"],
             "schedule": r["schedule"], "ettr": r["ettr"], "goodput": r["goodput"],
             "badput_s": r["badput_s"],
             "faults": [{k: f[k] for k in ("index", "cause", "component", "detected",
                                           "time_to_detect_s", "named_vs_injected",
                                           "recovered")} for f in r["faults"]],
             "provenance": {"basis": "measured", "where": r["measured"]["where"],
                            "on": f'{r["measured"]["on"]} under the schedule '
                                  f'{r["measured"]["schedule"]}'},
             "predicted": _soak_predicted(r)} for r in sec["soaks"]]
    return {"status": "measured", "soaks": rows}


def _storage(doc: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    ckpt = extras.get("checkpoint.json")
    sim = doc["simulation"]
    interval = None if (run := _simulation(sim)) is None else run.ckpt_interval_min
    if not isinstance(ckpt, dict) or not ckpt.get("saves"):
        return {"status": "not_run", "tiers": [], "checkpoint_interval_min": interval}
    where = {"basis": "measured", "where": str(ckpt.get("where", "this host")),
             "on": str(ckpt.get("on", "checkpoint tiers"))}
    tiers: dict[str, dict[str, Any]] = {}
    for save in ckpt["saves"]:
        states = save.get("states") or {}
        t0 = states.get("staged")
        for tier, t in states.items():
            if tier == "staged" or t0 is None:
                continue
            lag = round(float(t) - float(t0), 4)
            row = tiers.setdefault(tier, {"tier": tier, "durable_after_s": lag})
            row["durable_after_s"] = max(row["durable_after_s"], lag)
    restore = ckpt.get("restore") or {}
    for row in tiers.values():
        # RPO: work lost if the job dies now = one checkpoint interval plus the time a
        # checkpoint takes to become durable in this tier.
        row["rpo_s"] = None if interval is None else round(interval * 60 + row[
            "durable_after_s"], 3)
        row["restore_s"] = (round(float(restore["seconds"]), 4)
                            if restore.get("tier") == row["tier"] else None)
        row["provenance"] = where
    return {"status": "measured", "tiers": [tiers[k] for k in sorted(tiers)],
            "checkpoint_interval_min": interval,
            "restore": {"tier": restore.get("tier"), "seconds": restore.get("seconds"),
                        "provenance": where}}


def build_disclosure(doc: dict[str, Any], extras: dict[str, Any], root: str) -> dict[str, Any]:
    steps = {s["key"]: s for s in doc["ledger"]}
    head = steps["headline"]
    return {
        "schema_version": DISCLOSURE_VERSION,
        "fleet": doc["fleet"]["fleet"],
        "generated_at": doc["generated_at"],
        "evidence_root": root,
        "report_schema": doc["schema_version"],
        "headline": {"gpus": head["count"], "provenance": {"basis": "spec",
                                                           "source": head["source"]}},
        "usable": {"certified_gpus": steps["certified"]["count"],
                   "expected_goodput_gpus": steps["goodput"]["count"],
                   "job_shape": doc["job_shape"]["name"]},
        "ledger": _ledger(doc),
        "performance": _performance(doc),
        "recovery": _recovery(doc),
        "soak": _soak(doc),
        "storage": _storage(doc, extras),
        "cost": doc.get("cost"),
    }
