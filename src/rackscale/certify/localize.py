"""Topology-aware group testing: from failing group tests to the part at fault.

The ladder first tests large groups laid along the topology (a tray, an NVLink domain, all
GPUs of one leaf on one rail), one test each. Only a failing group is split. A group test runs
at the pace of its weakest part, so:
- both halves fail   -> the fault is shared by every member: the part they have in common
  (the leaf both halves go through, the domain's NVLink switch trays);
- one half fails     -> recurse into it; the passing half supplies a known-good reference GPU;
- a few members left -> each is paired with the reference GPU (without one, with its neighbour
  in a ring of the members): the failing pairs name the member's own part (its NIC and cable,
  its NVLink port).
Each level's tests of every pending group run as one parallel batch, so one faulty part costs
about 2 log2(group size) extra tests; a fleet of n GPUs needs O(n) tests overall, never the
n(n-1)/2 of all-pairs testing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np


@dataclass(frozen=True, slots=True)
class Outcome:
    """A judged group test."""

    fail: bool
    rel: float  # median figure / reference
    fail_rel: float  # figure while failing (median of failing repeats)
    flapping: bool
    hard_fails: int
    confidence: float
    evidence: dict[str, object]


Tester = Callable[[list[np.ndarray]], list[Outcome]]


@dataclass(slots=True)
class Suspect:
    kind: Literal["member", "common", "unresolved"]
    members: np.ndarray  # the one GPU ("member") or the group sharing a part ("common")
    outcome: Outcome
    trail: list[dict[str, object]] = field(default_factory=list)


def not_reproduced(sp: Suspect) -> bool:
    """An unresolved suspect whose every retest passed: the group's shortfall did not show
    again. The ladder tests such a group once more before it calls it a stall of a shared
    host (`RunState.cleared`): only a shortfall seen twice is reported."""
    return sp.kind == "unresolved" and len(sp.trail) > 1 and not any(
        bool(step.get("fail")) for step in sp.trail[1:])


def _step(members: np.ndarray, out: Outcome) -> dict[str, object]:
    return {"gpus": len(members), "rel": round(out.rel, 4), "fail": out.fail}


def _pair_tests(members: np.ndarray, ref: int | None) -> list[np.ndarray]:
    """The tests of a group of one to three: each member with the reference; without one, each
    member with its neighbour in a ring, so every pair is distinct (a GPU paired with itself,
    or a pair tested twice, proves nothing) and a lone slow member fails exactly the two pairs
    it is in. A single GPU without a reference is tested alone."""
    if ref is not None:
        return [np.asarray([m, ref]) for m in members]
    n = len(members)
    if n == 1:
        return [np.asarray(members)]
    return [np.asarray([members[k], members[(k + 1) % n]]) for k in range(n if n > 2 else 1)]


def _blame_pairs(members: np.ndarray, out: Outcome, ref: int | None, outside: bool,
                 trail: list[dict[str, object]], outs: list[Outcome]) -> list[Suspect]:
    """Suspects of a group from its pair tests (laid out by _pair_tests)."""
    if ref is not None:
        hits = [(int(m), o) for m, o in zip(members, outs, strict=True) if o.fail]
        if outside and len(members) >= 2 and len(hits) == len(members):
            # Every member fails against a GPU that shares none of their parts: the part the
            # members share is at fault, and the worst pairing is its evidence.
            worst = min((o for _, o in hits), key=lambda o: o.rel)
            return [Suspect("common", members, worst, trail)]
    elif len(members) == 1:
        hits = [(int(members[0]), outs[0])] if outs[0].fail else []
    elif all(o.fail for o in outs):
        hits = []  # every pairing failed and there is no reference: cannot tell which
    else:
        # Ring pairs: member k is in pairs k-1 and k; blame it when both failed.
        hits = [(int(members[k]), min(outs[k - 1], outs[k], key=lambda o: o.rel))
                for k in range(len(outs)) if outs[k].fail and outs[k - 1].fail]
    if not hits:
        return [Suspect("unresolved", members, out, trail)]
    return [Suspect("member", np.asarray([m]), o, trail) for m, o in hits]


def bisect(failing: Sequence[tuple[np.ndarray, Outcome, int | None]], test: Tester,
           ) -> tuple[list[Suspect], int]:
    """Suspects behind each failing group (members, its outcome, a known-good GPU or None).
    Returns the suspects and the number of tests run."""
    # A reference given with a failing group lies outside it (another tray, another leaf on
    # the same rail): if every member fails against it, the members' shared part is at fault.
    # A reference taken from a passing half shares that part, so it cannot prove that.
    pending = [(np.asarray(m), o, ref, [_step(np.asarray(m), o)], ref is not None)
               for m, o, ref in failing]
    suspects: list[Suspect] = []
    tests = 0
    while pending:
        groups: list[np.ndarray] = []
        plan: list[int] = []  # tests of each pending group, in order (2 for its halves)
        for members, _out, ref, _trail, _outside in pending:
            if len(members) >= 4:
                half = len(members) // 2
                batch = [members[:half], members[half:]]
            else:
                batch = _pair_tests(members, ref)
            plan.append(len(batch))
            groups += batch
        outs = test(groups)
        tests += len(groups)
        nxt: list[tuple[np.ndarray, Outcome, int | None, list[dict[str, object]], bool]] = []
        pos = 0
        for (members, out, ref, trail, outside), count in zip(pending, plan, strict=True):
            mine, pos = outs[pos:pos + count], pos + count
            if len(members) >= 4:
                half = len(members) // 2
                h1, h2 = members[:half], members[half:]
                o1, o2 = mine
                t2 = [*trail, _step(h1, o1), _step(h2, o2)]
                if o1.fail and o2.fail:
                    worst = o1 if o1.rel <= o2.rel else o2
                    suspects.append(Suspect("common", members, worst, t2))
                elif o1.fail or o2.fail:
                    bad, good, o = (h1, h2, o1) if o1.fail else (h2, h1, o2)
                    nxt.append((bad, o, int(good[0]), t2, False))
                else:
                    suspects.append(Suspect("unresolved", members, out, t2))
                continue
            for grp, o in zip(_pair_tests(members, ref), mine, strict=True):
                trail.append({"gpus": len(grp), "pair_with_reference": ref is not None,
                              "rel": round(o.rel, 4), "fail": o.fail})
            suspects += _blame_pairs(members, out, ref, outside, trail, mine)
        pending = nxt
    return suspects, tests
