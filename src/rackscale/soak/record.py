"""The soak's result in the store: one `recovery.soak` event on the job (`job/<id>`), beside
the job's own `recovery.job` and `recovery.incident` events."""

from __future__ import annotations

from typing import Any

from rackscale.store import Kind, RecoverySoakV1, Store


def record_soak(store: Store, result: dict[str, Any]) -> int:
    """Append the soak's figures; returns the event's sequence number."""
    faults = [{k: f.get(k) for k in (
        "index", "cause", "action", "component", "injected_at_s", "detected",
        "time_to_detect_s", "named", "named_vs_injected", "recovered", "badput_s",
        "recertified")}
        for f in result["faults"]]
    payload = RecoverySoakV1(
        job=result["job"]["id"] or "", host=result["host"], lab=result["lab"],
        schedule=result["schedule"], window_s=result["window_s"],
        clean_step_s=result["clean_step_s"], ettr=result["ettr"],
        goodput=result["goodput"], badput_s=result["badput_s"], faults=faults,
        load_avg=result["load_avg"], lifecycle=result.get("lifecycle", {}), measured=True,
        predicted=result.get("predicted"))
    return store.append_event(f"job/{payload.job}", Kind.RECOVERY_SOAK, payload=payload,
                              actor="rackscale-soak",
                              reason=f"soak of {len(faults)} faults, ETTR "
                                     f"{result['ettr']['value']:.3f} (measured)")
