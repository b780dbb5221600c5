"""A hot rack leaves the job as one: every slot of it excluded, spares from other racks."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackscale.recovery import SparesExhausted
from rackscale.recovery.racks import UnknownSlotRack, hot_rack_move

RACK = {f"r{r}/g{g}": f"r{r}" for r in range(1, 4) for g in range(4)}


def test_every_slot_of_the_hot_rack_leaves_and_spares_come_from_another_rack() -> None:
    job = ["r1/g0", "r2/g0", "r1/g1", "r2/g1"]
    spares = ["r1/g2", "r3/g0", "r1/g3", "r3/g1", "r3/g2"]
    m = hot_rack_move(job, spares, RACK, {"r1"})
    assert m.racks == ("r1",)
    assert m.exclude == ("r1/g0", "r1/g1")
    assert m.moves == {"r1/g0": "r3/g0", "r1/g1": "r3/g1"}
    # the hot rack's own spares are not taken, and stay for after its repair
    assert m.spares_left == ("r1/g2", "r1/g3", "r3/g2")


def test_too_few_spares_outside_the_hot_rack_is_spares_exhausted() -> None:
    job = ["r1/g0", "r1/g1", "r2/g0"]
    with pytest.raises(SparesExhausted, match="only 1 spares lie in other racks"):
        hot_rack_move(job, ["r1/g2", "r1/g3", "r3/g0"], RACK, {"r1"})


def test_no_hot_rack_in_the_job_excludes_nothing() -> None:
    job = ["r1/g0", "r2/g0"]
    for hot in (set(), {"r3"}):
        m = hot_rack_move(job, ["r3/g0"], RACK, hot)
        assert m.exclude == () and m.moves == {} and m.spares_left == ("r3/g0",)


def test_a_slot_of_unknown_rack_is_refused() -> None:
    with pytest.raises(UnknownSlotRack, match="elsewhere"):
        hot_rack_move(["r1/g0", "elsewhere"], [], RACK, {"r1"})


slots = st.lists(st.sampled_from(sorted(RACK)), min_size=1, max_size=12, unique=True)


@given(slots=slots, n_job=st.integers(1, 12),
       hot=st.sets(st.sampled_from(["r1", "r2", "r3"])))
def test_any_assignment_moves_exactly_the_hot_slots_to_cool_distinct_spares(
        slots: list[str], n_job: int, hot: set[str]) -> None:
    job, spares = slots[:n_job], slots[n_job:]
    in_hot = [s for s in job if RACK[s] in hot]
    cool = [s for s in spares if RACK[s] not in hot]
    if len(cool) < len(in_hot):
        with pytest.raises(SparesExhausted):
            hot_rack_move(job, spares, RACK, hot)
        return
    m = hot_rack_move(job, spares, RACK, hot)
    assert list(m.exclude) == in_hot
    assert set(m.moves) == set(in_hot)
    taken = list(m.moves.values())
    assert len(set(taken)) == len(taken) and all(RACK[s] not in hot for s in taken)
    assert set(taken) | set(m.spares_left) == set(spares)
    assert not set(taken) & set(m.spares_left)
