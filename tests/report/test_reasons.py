"""Reason codes are one enum: every code the ledger writes is a member (with its detail), and
the report explains every one of them."""

from __future__ import annotations

from rackscale.fleet import Topology
from rackscale.report import REASONS, build_ledger, collect
from rackscale.report.reasons import Reason, describe
from rackscale.store import Store

from .events import SEED_FAULTS, certify, onboard, simulate


def test_the_enum_is_the_list_of_codes() -> None:
    assert {r.value for r in Reason} == set(REASONS)
    assert all(REASONS[r] == r.meaning and r.meaning for r in Reason)
    assert Reason.RACK_STATE.of("maintenance") == "rack_state:maintenance"
    assert describe(Reason.TRAY_STATE.of("triage")).startswith(Reason.TRAY_STATE.meaning)
    assert describe("no_such_code") == "unknown reason code"


def test_every_code_of_a_ledger_is_a_member_and_described(fleet_store: Store,
                                                          topo: Topology) -> None:
    onboard(fleet_store, topo, racks=[r.id for r in topo.racks[1:]])  # one rack not onboarded
    certify(fleet_store, topo, SEED_FAULTS)
    simulate(fleet_store, topo, ettr=0.9)
    ledger = build_ledger(collect(fleet_store))
    codes = {s.reason for s in ledger.steps} | {k for s in ledger.steps for k in s.lost}
    codes |= {c for c in ledger.gpu_reason if c != "ok"}  # "ok": a GPU no step dropped
    assert len(codes) > 8
    for code in codes:
        name = code.partition(":")[0]
        assert name in {r.value for r in Reason}, code
        assert describe(code) != "unknown reason code", code
