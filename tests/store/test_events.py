"""The event contract: every kind has a typed, versioned payload model; the store checks each
payload on append, refuses unknown kinds with the valid list, and readers parse through it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.fleet import Topology
from rackscale.lifecycle import enroll, open_store
from rackscale.store import (
    EVENT_KINDS,
    InvalidPayload,
    LifecycleSlurmV1,
    LifecycleTransitionV1,
    NewEvent,
    Payload,
    Store,
    UnknownEventKind,
    event_kind,
    load_topology,
)

ROOT = Path(__file__).resolve().parents[2]

# One valid payload per built-in kind, as its writer builds it.
EXAMPLES: dict[str, dict[str, Any]] = {
    "fleet.loaded": {"fleet": "f", "changed": True, "racks_added": ["f/r01"],
                     "racks_removed": [], "components_added": 9, "components_removed": 0,
                     "components_changed": 0, "spec_changed": False, "total_components": 9},
    "fleet.rack_added": {"template": "gb200-nvl72"},
    "fleet.rack_removed": {},
    "certify.run": {"run_id": "c-1", "backend": "twin", "seed": 7, "stages": [1, 2],
                    "collective_tests": 3, "allpairs_tests": 10, "campaign_s": 1.5,
                    "gpus_total": 5, "gpus_clear": 4, "findings": 1, "simulated": True},
    "certify.finding": {"component": "f/r01/c01/gpu0", "kind": "gpu_dead", "stage": 1,
                        "evidence": {"simulated": True}, "confidence": 0.9, "run_id": "c-1",
                        "backend": "twin", "verdict": "fail"},
    "certify.result": {"run_id": "c-1", "backend": "twin", "verdict": "pass",
                       "stages_passed": [1, 2]},
    "lifecycle.transition": {"from": "cabled", "to": "powered"},
    "lifecycle.interlock": {"rule": "coolant", "action": "power_cap", "at": 3.0, "tier": 1},
    "lifecycle.slurm": {"action": "drain", "node": "f-r01-c01"},
    "lifecycle.noted": {"finding_seq": 4, "action": "none"},
    "simulate.run": {"run_id": "sim-1", "fleet": "f", "simulated": True, "job_gpus": 72,
                     "days": 5, "trials": 10, "seed": 7, "failure_model": "llama3",
                     "ckpt_interval_min": 20.0, "ettr": {"mean": 0.9, "ci95": 0.01},
                     "goodput": {"scheduling": 1.0, "runtime": 0.9, "program": 0.4,
                                 "total": 0.36}, "job_mttf_h": float("inf")},
    "simulate.sweep": {"fleet": "f", "simulated": True, "param": "ckpt-interval",
                       "field": "ckpt_interval_min", "values": [5, 10], "job_gpus": 72,
                       "days": 5, "trials": 10, "seed": 7,
                       "points": [{"value": 5, "ettr": {"mean": 0.9, "ci95": 0.01}},
                                  {"value": 10, "ettr": {"mean": 0.91, "ci95": 0.01}}],
                       "optimum": {"value": 10}},
}


def _required(kind: str) -> list[str]:
    model = EVENT_KINDS[kind].latest
    return [f.alias or name for name, f in model.model_fields.items() if f.is_required()]


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_each_kind_takes_its_writers_payload_and_refuses_one_missing_a_field(
        sqlite_store: Store, kind: str) -> None:
    seq = sqlite_store.append_event("f/r01", kind, EXAMPLES[kind], reason="test")
    (stored,) = sqlite_store.events(kind=kind)
    # read back as written (the infinite MTTF of a job never interrupted included)
    assert stored.seq == seq and stored.payload == EXAMPLES[kind]
    assert kind == stored.parsed().KIND
    for name in _required(kind):
        broken = {k: v for k, v in EXAMPLES[kind].items() if k != name}
        with pytest.raises(InvalidPayload, match=rf"{re.escape(kind)}.*\b{name}\b"):
            sqlite_store.append_event("f/r01", kind, broken, reason="test")
    assert len(sqlite_store.events(kind=kind)) == 1  # the refused ones wrote nothing


def test_an_unknown_kind_is_refused_with_the_valid_kinds(sqlite_store: Store) -> None:
    with pytest.raises(UnknownEventKind) as err:
        sqlite_store.append_event("f/r01", "lifecycle.transtion", {"to": "x"})
    assert "lifecycle.transition" in str(err.value) and "simulate.sweep" in str(err.value)
    good = NewEvent(component_id="f/r01", kind="fleet.rack_removed")
    with pytest.raises(UnknownEventKind):  # a batch with one bad event writes none of it
        sqlite_store.append_events([good, NewEvent(component_id="f/r01", kind="nope")])
    assert sqlite_store.count_events() == 0


def test_closed_payloads_refuse_unnamed_keys_open_ones_keep_them(sqlite_store: Store) -> None:
    with pytest.raises(InvalidPayload, match="why: Extra inputs"):
        sqlite_store.append_event("f/r01/c01", "lifecycle.slurm",
                                  {"action": "drain", "node": "n", "why": "x"})
    payload = {"from": "onboard", "to": "burn_in", "driver": "redfish"}
    sqlite_store.append_event("f/r01/c01", "lifecycle.transition", payload)
    (ev,) = sqlite_store.events(kind="lifecycle.transition")
    assert ev.payload == payload
    moved = ev.parsed()
    assert isinstance(moved, LifecycleTransitionV1) and moved.from_ == "onboard"


def test_a_model_instance_is_dumped_and_must_be_of_its_kind(sqlite_store: Store) -> None:
    sqlite_store.append_event("f/r01/c01", "lifecycle.slurm",
                              LifecycleSlurmV1(action="resume", node="f-r01-c01"))
    (ev,) = sqlite_store.events(kind="lifecycle.slurm")
    assert ev.payload == {"action": "resume", "node": "f-r01-c01"}
    with pytest.raises(InvalidPayload, match="LifecycleSlurmV1"):
        sqlite_store.append_event("f/r01/c01", "lifecycle.noted",
                                  LifecycleSlurmV1(action="resume", node="n"))


def test_versions_pick_the_model_the_payload_was_written_with(sqlite_store: Store) -> None:
    with EVENT_KINDS.scoped():
        @event_kind("lifecycle.noted")
        class NotedV2(Payload):
            VERSION = 2
            finding_seq: int
            why: str

        sqlite_store.append_event("f/r01", "lifecycle.noted", {"finding_seq": 1})
        sqlite_store.append_event("f/r01", "lifecycle.noted",
                                  NotedV2(finding_seq=2, why="leaf finding"))
        old, new = sqlite_store.events(kind="lifecycle.noted")
        assert new.payload == {"finding_seq": 2, "why": "leaf finding", "v": 2}
        assert type(old.parsed()).__name__ == "LifecycleNotedV1"
        assert isinstance(new.parsed(), NotedV2)
        with pytest.raises(InvalidPayload, match="valid versions: 1, 2"):
            sqlite_store.append_event("f/r01", "lifecycle.noted", {"finding_seq": 3, "v": 3})
        with pytest.raises(InvalidPayload, match="why"):  # v2 needs its own fields
            sqlite_store.append_event("f/r01", "lifecycle.noted", {"finding_seq": 3, "v": 2})
    assert sorted(EVENT_KINDS["lifecycle.noted"].versions) == [1]  # scoped() undid it


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["action", "node", "rule", "v"]),
                       st.one_of(st.sampled_from(["drain", "resume", "hold"]), st.integers(),
                                 st.none(), st.text(max_size=5)), max_size=4))
def test_slurm_payloads_are_taken_exactly_when_they_fit(payload: dict[str, Any]) -> None:
    from rackscale.store.events import parse

    fits = (set(payload) == {"action", "node"} and payload["action"] in ("drain", "resume")
            and isinstance(payload["node"], str))
    try:
        parse("lifecycle.slurm", payload)
    except InvalidPayload:
        assert not fits, payload
    else:
        assert fits, payload


def test_the_real_writers_fit_their_models(sqlite_store: Store, seed_topo: Topology) -> None:
    load_topology(sqlite_store, seed_topo)
    enroll(open_store(sqlite_store), seed_topo)
    events = sqlite_store.events()
    assert {e.kind for e in events} == {"fleet.loaded", "fleet.rack_added",
                                        "lifecycle.transition"}
    assert all(e.kind == e.parsed().KIND for e in events)


def test_every_kind_is_listed_in_the_contract_with_its_model_and_fields() -> None:
    doc = (ROOT / "docs" / "contracts.md").read_text()
    rows = {m.group(1): line for line in doc.splitlines()
            if (m := re.match(r"\| `([a-z_]+\.[a-z_]+)` \|", line))}
    assert set(EVENT_KINDS) <= set(rows), set(EVENT_KINDS) - set(rows)
    for kind, entry in EVENT_KINDS.items():
        model = entry.latest
        assert f"`{model.__name__}`" in rows[kind], kind
        for name, f in model.model_fields.items():
            assert re.search(rf"\b{f.alias or name}\b", rows[kind]), (kind, name)
