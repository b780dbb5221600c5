"""Every event is read through its payload model: `Event.read(Model)` hands a reader the typed
payload of its kind (and refuses another kind), and the store refuses to hand out an event of
a kind no model is registered for, as it refuses to write or query one."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rackscale.store import (
    CertifyResultV1,
    EventRow,
    InvalidPayload,
    Kind,
    LifecycleTransitionV1,
    Store,
    UnknownEventKind,
)


def test_a_reader_gets_the_typed_payload_of_its_kind(sqlite_store: Store) -> None:
    sqlite_store.append_event("f/r01", Kind.CERTIFY_RESULT,
                              {"run_id": "c-1", "backend": "twin", "verdict": "pass",
                               "stages_passed": [1, "tray"]})
    (ev,) = sqlite_store.events(kind=Kind.CERTIFY_RESULT)
    result = ev.read(CertifyResultV1)
    assert isinstance(result, CertifyResultV1)
    assert (result.verdict, result.run_id, result.stages_passed) == ("pass", "c-1", [1, "tray"])
    assert ev.data is result and ev.parsed() is result  # parsed once
    # events of one read with the same stored payload share its model
    sqlite_store.append_event("f/r02", Kind.CERTIFY_RESULT, dict(ev.payload))
    one, two = sqlite_store.events(kind=Kind.CERTIFY_RESULT)
    assert one.read(CertifyResultV1) is two.read(CertifyResultV1)
    assert one.payload is not two.payload  # each its own copy as stored
    assert ev.payload == {"run_id": "c-1", "backend": "twin", "verdict": "pass",
                          "stages_passed": [1, "tray"]}  # the copy as stored stays plain JSON


def test_a_reader_that_expects_another_kind_is_refused(sqlite_store: Store) -> None:
    seq = sqlite_store.append_event("f/r01", Kind.LIFECYCLE_TRANSITION,
                                    {"from": None, "to": "cabled"})
    (ev,) = sqlite_store.events()
    assert ev.read(LifecycleTransitionV1).to == "cabled"
    with pytest.raises(InvalidPayload, match=rf"event seq {seq} is lifecycle.transition "
                       r"\(payload model LifecycleTransitionV1\); its reader expected "
                       r"certify.result \(CertifyResultV1\)"):
        ev.read(CertifyResultV1)


def test_an_event_of_an_unknown_kind_in_the_store_is_refused(sqlite_store: Store) -> None:
    sqlite_store.append_event("f/r01", Kind.LIFECYCLE_TRANSITION, {"from": None, "to": "cabled"})
    with sqlite_store.session() as s:  # as another version of rackscale (or a hand) wrote it
        s.add(EventRow(time=datetime.now(UTC), component_id="f/r01", kind="lifecycle.teleport",
                       payload={"to": "mars"}, actor="x", reason=""))
    with pytest.raises(UnknownEventKind, match=r"event seq 2 is of kind 'lifecycle.teleport', "
                       r"which no payload model is registered for .*valid kinds: "
                       r"certify.finding, "):
        sqlite_store.events()
    with pytest.raises(UnknownEventKind):
        sqlite_store.events(kind_prefix="lifecycle.")
    # a query that does not reach it still answers
    assert [e.seq for e in sqlite_store.events(kind=Kind.LIFECYCLE_TRANSITION)] == [1]


def test_unknown_kinds_are_refused_on_append_and_in_queries(sqlite_store: Store) -> None:
    with pytest.raises(UnknownEventKind, match=r"lifecycle\.transitoin"):
        sqlite_store.append_event("f/r01", "lifecycle.transitoin", {"to": "x"})
    with pytest.raises(UnknownEventKind, match=r"certify\.results"):
        sqlite_store.events(kind="certify.results")
    assert sqlite_store.events() == []
