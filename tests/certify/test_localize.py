"""Group testing (certify/localize.bisect): which part is blamed, on what evidence, at what cost.

The tester here is a group test with the one rule the ladder relies on: a group runs at the pace
of its slowest member, and it fails below 0.95 of the reference. A shared part at fault (a leaf,
an NVLink switch) makes every GPU behind it slow, so it appears as all members slow. The ladder
tests on the digital twin (test_ladder_twin.py) run the same code against the twin's hardware.
"""

from __future__ import annotations

import math
from dataclasses import FrozenInstanceError

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.certify.localize import Outcome, Suspect, bisect, not_reproduced

FAIL_BELOW = 0.95


class PaceRig:
    """Health per GPU (1.0 when not listed); records every group it was asked to test."""

    def __init__(self, health: dict[int, float]) -> None:
        self.health = health
        self.batches: list[list[list[int]]] = []

    def outcome(self, group) -> Outcome:
        rel = min(self.health.get(int(g), 1.0) for g in group)
        return Outcome(fail=rel < FAIL_BELOW, rel=rel, fail_rel=rel, flapping=False,
                       hard_fails=0, confidence=0.9, evidence={"gpus": [int(g) for g in group]})

    def __call__(self, groups: list[np.ndarray]) -> list[Outcome]:
        self.batches.append([[int(g) for g in grp] for grp in groups])
        return [self.outcome(g) for g in groups]


def run(rig: PaceRig, members, ref: int | None):
    members = np.asarray(members)
    return bisect([(members, rig.outcome(members), ref)], rig)


def step(gpus: int, rel: float, fail: bool) -> dict[str, object]:
    return {"gpus": gpus, "rel": rel, "fail": fail}


def pair(rel: float, fail: bool) -> dict[str, object]:
    return {"gpus": 2, "pair_with_reference": True, "rel": rel, "fail": fail}


def kinds(suspects) -> list[tuple[str, list[int]]]:
    return [(s.kind, [int(m) for m in s.members]) for s in suspects]


# --- two or three members with a reference from outside the group ----------------------------

def test_one_failing_member_of_a_pair_with_outside_reference_is_blamed_on_that_member():
    rig = PaceRig({1: 0.612345})
    suspects, tests = run(rig, [0, 1], ref=9)
    assert kinds(suspects) == [("member", [1])]
    assert suspects[0].outcome.rel == 0.612345
    assert suspects[0].trail == [step(2, 0.6123, True), pair(1.0, False), pair(0.6123, True)]
    assert rig.batches == [[[0, 9], [1, 9]]]
    assert tests == 2


def test_one_failing_member_of_three_with_outside_reference_is_that_member():
    rig = PaceRig({12: 0.5})
    suspects, tests = run(rig, [10, 11, 12], ref=3)
    assert kinds(suspects) == [("member", [12])]
    assert rig.batches == [[[10, 3], [11, 3], [12, 3]]]
    assert tests == 3


def test_two_failing_members_of_three_are_both_blamed_not_the_shared_part():
    rig = PaceRig({10: 0.7, 12: 0.8})
    suspects, _ = run(rig, [10, 11, 12], ref=3)
    assert kinds(suspects) == [("member", [10]), ("member", [12])]
    assert [s.outcome.rel for s in suspects] == [0.7, 0.8]


def test_every_member_failing_against_an_outside_reference_blames_the_shared_part():
    rig = PaceRig({0: 0.81234, 1: 0.7, 2: 0.9})
    suspects, tests = run(rig, [0, 1, 2], ref=7)
    assert kinds(suspects) == [("common", [0, 1, 2])]
    assert suspects[0].outcome.rel == 0.7  # the worst pairing is the shared part's evidence
    assert suspects[0].trail == [step(3, 0.7, True), pair(0.8123, True), pair(0.7, True),
                                 pair(0.9, True)]
    assert tests == 3


def test_a_single_gpu_failing_against_a_reference_is_a_member_fault():
    rig = PaceRig({5: 0.5})
    suspects, tests = run(rig, [5], ref=0)
    assert kinds(suspects) == [("member", [5])]
    assert rig.batches == [[[5, 0]]]
    assert tests == 1


def test_a_group_whose_pairings_all_pass_is_unresolved_with_its_own_outcome():
    rig = PaceRig({})
    group_outcome = Outcome(fail=True, rel=0.9, fail_rel=0.9, flapping=True, hard_fails=1,
                            confidence=0.6, evidence={"flapping": True})
    suspects, tests = bisect([(np.asarray([0, 1]), group_outcome, 4)], rig)
    assert kinds(suspects) == [("unresolved", [0, 1])]
    assert suspects[0].outcome is group_outcome
    assert suspects[0].trail == [step(2, 0.9, True), pair(1.0, False), pair(1.0, False)]
    assert tests == 2


# --- two or three members and no reference: each against its neighbour in a ring ----------

def ring_pair(rel: float, fail: bool) -> dict[str, object]:
    return {"gpus": 2, "pair_with_reference": False, "rel": rel, "fail": fail}


def test_without_reference_three_members_are_paired_in_a_ring_of_distinct_pairs():
    rig = PaceRig({2: 0.6})
    suspects, tests = run(rig, [0, 1, 2], ref=None)
    assert kinds(suspects) == [("member", [2])]
    assert suspects[0].outcome.rel == 0.6
    assert suspects[0].trail == [step(3, 0.6, True), ring_pair(1.0, False),
                                 ring_pair(0.6, True), ring_pair(0.6, True)]
    assert rig.batches == [[[0, 1], [1, 2], [2, 0]]]
    assert tests == 3


def test_without_reference_the_slow_member_is_blamed_and_never_its_partners():
    # Each member's partner is innocent: blaming a GPU for its partner's slowness would send a
    # healthy tray to triage.
    for bad in (10, 11, 12):
        rig = PaceRig({bad: 0.5})
        suspects, _ = run(rig, [10, 11, 12], ref=None)
        assert kinds(suspects) == [("member", [bad])], bad


def test_without_reference_two_slow_members_of_three_are_unresolved():
    rig = PaceRig({0: 0.5, 1: 0.6})
    suspects, _ = run(rig, [0, 1, 2], ref=None)
    assert kinds(suspects) == [("unresolved", [0, 1, 2])]
    assert suspects[0].outcome.rel == 0.5  # the group's own outcome


def test_a_pair_without_reference_whose_pairing_fails_is_unresolved():
    # The one pair holds the slow GPU and fails: nothing tells which member it is.
    rig = PaceRig({1: 0.6})
    suspects, tests = run(rig, [0, 1], ref=None)
    assert kinds(suspects) == [("unresolved", [0, 1])]
    assert suspects[0].outcome.rel == 0.6
    assert suspects[0].trail == [step(2, 0.6, True), ring_pair(0.6, True)]
    assert rig.batches == [[[0, 1]]]
    assert tests == 1


def test_a_pair_without_reference_whose_pairing_passes_is_unresolved():
    rig = PaceRig({})
    group_outcome = Outcome(fail=True, rel=0.9, fail_rel=0.9, flapping=True, hard_fails=1,
                            confidence=0.6, evidence={})
    suspects, _ = bisect([(np.asarray([0, 1]), group_outcome, None)], rig)
    assert kinds(suspects) == [("unresolved", [0, 1])]
    assert suspects[0].outcome is group_outcome


def test_a_single_gpu_without_reference_is_tested_alone_and_blamed():
    rig = PaceRig({3: 0.4})
    suspects, tests = run(rig, [3], ref=None)
    assert kinds(suspects) == [("member", [3])]
    assert suspects[0].trail == [step(1, 0.4, True),
                                 {"gpus": 1, "pair_with_reference": False, "rel": 0.4,
                                  "fail": True}]
    assert rig.batches == [[[3]]]
    assert tests == 1


def test_a_single_gpu_without_reference_that_passes_alone_is_unresolved():
    rig = PaceRig({})
    suspects, _ = run(rig, [3], ref=None)
    assert kinds(suspects) == [("unresolved", [3])]


# --- four or more members: halving ------------------------------------------------------------

def test_eight_gpus_halve_down_to_a_pair_and_the_trail_shows_every_level():
    rig = PaceRig({5: 0.876543})
    suspects, tests = run(rig, range(8), ref=None)
    assert kinds(suspects) == [("member", [5])]
    assert suspects[0].outcome.rel == 0.876543
    assert suspects[0].trail == [
        step(8, 0.8765, True), step(4, 1.0, False), step(4, 0.8765, True),
        step(2, 0.8765, True), step(2, 1.0, False),
        pair(1.0, False), pair(0.8765, True)]
    # The passing half's first GPU is the reference for the failing half's pairs.
    assert rig.batches == [[[0, 1, 2, 3], [4, 5, 6, 7]], [[4, 5], [6, 7]], [[4, 6], [5, 6]]]
    assert tests == 6


def test_four_members_are_halved_not_paired():
    rig = PaceRig({2: 0.5})
    suspects, tests = run(rig, [0, 1, 2, 3], ref=9)
    assert kinds(suspects) == [("member", [2])]
    assert rig.batches == [[[0, 1], [2, 3]], [[2, 0], [3, 0]]]
    assert tests == 4


def test_three_members_are_paired_not_halved():
    rig = PaceRig({1: 0.5})
    run(rig, [0, 1, 2], ref=9)
    assert rig.batches == [[[0, 9], [1, 9], [2, 9]]]


def test_both_halves_failing_blame_the_shared_part_with_the_worst_half():
    rig = PaceRig({g: 0.9 for g in range(4)} | {g: 0.7123456 for g in range(4, 8)})
    suspects, tests = run(rig, range(8), ref=None)
    assert kinds(suspects) == [("common", list(range(8)))]
    assert suspects[0].outcome.rel == 0.7123456
    assert suspects[0].trail == [step(8, 0.7123, True), step(4, 0.9, True),
                                 step(4, 0.7123, True)]
    assert tests == 2
    rig = PaceRig({g: 0.6 for g in range(4)} | {g: 0.8 for g in range(4, 8)})
    suspects, _ = run(rig, range(8), ref=None)
    assert suspects[0].outcome.rel == 0.6


def test_both_halves_passing_leave_the_group_unresolved():
    # A fault seen only when the whole group runs (e.g. congestion at full scale).
    class WholeGroupOnly(PaceRig):
        def outcome(self, group) -> Outcome:
            rel = 0.8 if len(group) == 8 else 1.0
            return Outcome(fail=rel < FAIL_BELOW, rel=rel, fail_rel=rel, flapping=False,
                           hard_fails=0, confidence=0.9, evidence={})

    rig = WholeGroupOnly({})
    suspects, tests = run(rig, range(8), ref=None)
    assert kinds(suspects) == [("unresolved", list(range(8)))]
    assert suspects[0].outcome.rel == 0.8
    assert suspects[0].trail == [step(8, 0.8, True), step(4, 1.0, False), step(4, 1.0, False)]
    assert tests == 2


def test_several_failing_groups_are_tested_in_one_batch_per_level():
    rig = PaceRig({2: 0.5, 11: 0.6, 20: 0.7, 21: 0.7, 22: 0.7})
    groups = [np.arange(0, 4), np.arange(10, 12), np.arange(20, 23)]
    suspects, tests = bisect([(g, rig.outcome(g), 30) for g in groups], rig)
    assert kinds(suspects) == [("member", [11]), ("common", [20, 21, 22]), ("member", [2])]
    assert [s.outcome.rel for s in suspects] == [0.6, 0.7, 0.5]
    assert rig.batches[0] == [[0, 1], [2, 3], [10, 30], [11, 30], [20, 30], [21, 30], [22, 30]]
    assert rig.batches[1] == [[2, 0], [3, 0]]
    assert tests == 9


def test_a_common_fault_does_not_stop_the_other_groups_of_its_batch():
    rig = PaceRig({0: 0.7, 1: 0.7, 11: 0.6})
    groups = [np.arange(0, 2), np.arange(10, 12)]
    suspects, _ = bisect([(g, rig.outcome(g), 30) for g in groups], rig)
    assert kinds(suspects) == [("common", [0, 1]), ("member", [11])]


# --- the cost: O(log n) tests per faulty part --------------------------------------------------

# (group size, faulty GPU) -> tests run; with a reference from outside or none, the count is
# the same: two per halving plus one per remaining member.
EXPECTED_TESTS = {
    (4, 0): 4, (5, 0): 4, (5, 4): 5, (6, 5): 5, (7, 0): 5, (7, 6): 6, (8, 7): 6,
    (16, 3): 8, (64, 40): 12, (100, 99): 14, (128, 0): 14,
}


def test_test_count_is_pinned_for_several_group_sizes():
    for (n, bad), expected in EXPECTED_TESTS.items():
        for ref in (None, 1000):
            rig = PaceRig({bad: 0.5})
            suspects, tests = run(rig, range(n), ref=ref)
            assert kinds(suspects) == [("member", [bad])], (n, bad, ref)
            assert tests == expected == sum(len(b) for b in rig.batches), (n, bad, ref)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(n=st.integers(min_value=3, max_value=300), data=st.data(),
       outside_ref=st.booleans())
def test_one_slow_gpu_is_always_found_within_two_log2_n_plus_three_tests(n, data, outside_ref):
    bad = data.draw(st.integers(min_value=0, max_value=n - 1))
    rig = PaceRig({bad: data.draw(st.floats(min_value=0.0, max_value=0.94))})
    suspects, tests = run(rig, range(n), ref=n + 1 if outside_ref else None)
    assert kinds(suspects) == [("member", [bad])]
    assert {"gpus": 2, "pair_with_reference": outside_ref or n >= 4,
            "rel": round(rig.health[bad], 4), "fail": True} in suspects[0].trail
    assert tests == sum(len(b) for b in rig.batches)
    assert tests <= 2 * math.floor(math.log2(n)) + 3
    assert all(len(set(g)) == len(g) for b in rig.batches for g in b)


# --- a shortfall must be seen twice before it is reported (not_reproduced) -------------------

def _retested(kind: str, retests: list[bool]) -> Suspect:
    """A suspect whose group failed once (the first step of its trail), then `retests`."""
    out = Outcome(fail=True, rel=0.9, fail_rel=0.9, flapping=False, hard_fails=0,
                  confidence=0.9, evidence={})
    trail = [step(8, 0.9, True)] + [step(4, 0.9 if f else 1.0, f) for f in retests]
    return Suspect(kind, np.arange(8), out, trail)  # type: ignore[arg-type]


def test_a_shortfall_seen_once_and_passing_every_retest_is_not_reproduced():
    assert not_reproduced(_retested("unresolved", [False]))
    assert not_reproduced(_retested("unresolved", [False, False]))


def test_a_shortfall_seen_again_in_any_retest_is_reproduced():
    for retests in ([True], [True, False], [False, True], [True, True]):
        assert not not_reproduced(_retested("unresolved", retests)), retests


def test_a_shortfall_not_retested_yet_is_not_called_unreproduced():
    # Only the group's own failing test: nothing has tried to reproduce it.
    assert not not_reproduced(_retested("unresolved", []))


def test_a_blamed_member_or_shared_part_is_never_unreproduced():
    for kind in ("member", "common"):
        assert not not_reproduced(_retested(kind, [False, False])), kind


def test_bisection_whose_retests_all_pass_leaves_a_shortfall_seen_once():
    class WholeGroupOnly(PaceRig):
        def outcome(self, group) -> Outcome:
            rel = 0.8 if len(group) == 8 else 1.0
            return Outcome(fail=rel < FAIL_BELOW, rel=rel, fail_rel=rel, flapping=False,
                           hard_fails=0, confidence=0.9, evidence={})

    [sp], _ = run(WholeGroupOnly({}), range(8), ref=None)
    assert sp.kind == "unresolved" and not_reproduced(sp)
    # The ring pair of two holds the slow GPU and fails again: seen twice, though unresolved.
    [sp], _ = run(PaceRig({1: 0.6}), [0, 1], ref=None)
    assert sp.kind == "unresolved" and not not_reproduced(sp)


# --- evidence carried by the suspects -----------------------------------------------------------

def test_two_slow_gpus_in_one_quarter_are_both_blamed_not_their_shared_part():
    # The reference of the last level comes from the passing quarter, inside the group: it
    # shares the members' parts, so all pairs failing against it cannot prove a shared fault.
    rig = PaceRig({4: 0.6, 5: 0.7})
    suspects, tests = run(rig, range(8), ref=None)
    assert kinds(suspects) == [("member", [4]), ("member", [5])]
    assert [s.outcome.rel for s in suspects] == [0.6, 0.7]
    assert rig.batches[-1] == [[4, 6], [5, 6]]
    assert tests == 6


def test_a_member_blamed_in_a_ring_carries_its_worse_pair():
    # A pair's figure here is the product of its GPUs' health: a slow GPU next to a slightly
    # slow one fails worse in that pair, and that worse pair is its evidence.
    class ProductRig(PaceRig):
        def outcome(self, group) -> Outcome:
            rel = float(np.prod([self.health.get(int(g), 1.0) for g in group]))
            return Outcome(fail=rel < FAIL_BELOW, rel=rel, fail_rel=rel, flapping=False,
                           hard_fails=0, confidence=0.9, evidence={})

    for partner_first in (True, False):
        health = {1: 0.5, 0: 0.97} if partner_first else {1: 0.5, 2: 0.97}
        rig = ProductRig(health)
        suspects, _ = run(rig, [0, 1, 2], ref=None)
        assert kinds(suspects) == [("member", [1])]
        assert suspects[0].outcome.rel == pytest.approx(0.485)


def test_outcomes_are_immutable_evidence():
    out = PaceRig({}).outcome([0])
    with pytest.raises(FrozenInstanceError):
        out.rel = 0.1  # type: ignore[misc]
