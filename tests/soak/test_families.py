"""A soak's recovery steps by fault family: every lab action belongs to one family, and the
table is the mean of each step over the family's faults that measured it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rackscale.soak import LAB_ACTIONS, verdict
from rackscale.soak.families import FAMILIES, FAMILY_OF_ACTION, RECOVERY_STEPS, by_family, family_of
from rackscale.soak.schedule import BY_CAUSE, NETWORK


def test_every_action_the_lab_can_play_has_a_family() -> None:
    actions = {a.action for acts in (*LAB_ACTIONS.values(), *BY_CAUSE.values(), NETWORK)
               for a in acts}
    assert actions <= set(FAMILY_OF_ACTION), actions - set(FAMILY_OF_ACTION)
    assert set(FAMILY_OF_ACTION.values()) <= set(FAMILIES)
    with pytest.raises(ValueError, match="known: bad_cable"):
        family_of("teleport")


def _row(i: int, action: str, detect: float | None, stop: float, took: float | None) -> dict:
    return {"index": i, "action": action, "detected": detect is not None,
            "time_to_detect_s": detect,
            "badput_s": {"running_degraded": 1.0, "localization": 2.0, "stop": stop,
                         "restart": 3.0, "restore": 0.5, "lost_work": 0.25},
            "recertified": None if took is None else {"took_s": took, "passed": True}}


@given(rows=st.lists(st.tuples(st.sampled_from(sorted(FAMILY_OF_ACTION)),
                               st.one_of(st.none(), st.floats(0, 100)), st.floats(0, 10),
                               st.one_of(st.none(), st.floats(0, 60))), max_size=8))
@settings(max_examples=60, deadline=None)
def test_each_step_is_the_mean_over_the_familys_faults_that_measured_it(rows) -> None:
    result = {"faults": [_row(i, *r) for i, r in enumerate(rows)]}
    table = by_family(result)
    assert list(table) == [f for f in FAMILIES if f in table]  # in the families' order
    for fam, got in table.items():
        mine = [(i, r) for i, r in enumerate(rows) if FAMILY_OF_ACTION[r[0]] == fam]
        assert got["faults"] == [i for i, _ in mine]
        for step, pick in (("detect_s", 1), ("drain_s", 2), ("recertify_s", 3)):
            xs = [r[pick] for _, r in mine if r[pick] is not None]
            cell = got["steps"][step]
            assert cell["n"] == len(xs)
            if xs:
                assert cell["value"] == pytest.approx(sum(xs) / len(xs), abs=1e-3)
                assert cell["basis"] == "measured"
            else:
                assert cell["value"] is None and cell["basis"] == "not measured"
        assert set(got["steps"]) == set(RECOVERY_STEPS)
    assert sum(len(t["faults"]) for t in table.values()) == len(rows)


def test_the_goal_wants_inside_the_interval_and_within_3_pp() -> None:
    wide = {"ettr": {"value": 0.70, "lo": 0.55, "hi": 0.85}}
    assert verdict(wide, {"ettr": 0.72})["met"]  # inside, +2 pp
    inside_far = verdict(wide, {"ettr": 0.742})
    assert inside_far["inside"] and not inside_far["met"]  # inside, +4.2 pp
    narrow = {"ettr": {"value": 0.70, "lo": 0.69, "hi": 0.71}}
    close_out = verdict(narrow, {"ettr": 0.72})
    assert not close_out["inside"] and not close_out["met"]  # within 3 pp, outside
