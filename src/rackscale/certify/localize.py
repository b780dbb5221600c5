"""Topology-aware group testing: from failing group tests to the part at fault.

The ladder first tests large groups laid along the topology (a tray, an NVLink domain, all
GPUs of one leaf on one rail), one test each. Only a failing group is split. A group test runs
at the pace of its weakest part, so:
- both halves fail   -> the fault is shared by every member: the part they have in common
  (the leaf both halves go through, the domain's NVLink switch trays);
- one half fails     -> recurse into it; the passing half supplies a known-good reference GPU;
- a few members left -> each is paired with the reference GPU: the failing pair names the
  member's own part (its NIC and cable, its NVLink port).
Each level's tests of every pending group run as one parallel batch, so one faulty part costs
about 2 log2(group size) extra tests; a fleet of n GPUs needs O(n) tests overall, never the
n(n-1)/2 of all-pairs testing.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _step(members: np.ndarray, out: Outcome) -> dict[str, object]:
    return {"gpus": len(members), "rel": round(out.rel, 4), "fail": out.fail}


def bisect(failing: list[tuple[np.ndarray, Outcome, int | None]], test: Tester,
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
        plan: list[tuple[str, int, int]] = []  # (what, pending index, member or -1)
        for idx, (members, _out, ref, _trail, _outside) in enumerate(pending):
            if len(members) >= 4:
                half = len(members) // 2
                plan.append(("halves", idx, -1))
                groups += [members[:half], members[half:]]
            elif ref is not None:
                for m in members:
                    plan.append(("member", idx, int(m)))
                    groups.append(np.asarray([m, ref]))
            else:  # two or three members and no reference: each against the others
                for m in members:
                    plan.append(("member", idx, int(m)))
                    groups.append(np.asarray([*[x for x in members if x != m][:1], m]))
        outs = test(groups)
        tests += len(groups)
        nxt = []
        pos = 0
        member_hits: dict[int, list[tuple[int, Outcome]]] = {}
        member_seen: set[int] = set()
        for what, idx, m in plan:
            members, out, ref, trail, _outside = pending[idx]
            if what == "halves":
                half = len(members) // 2
                h1, h2 = members[:half], members[half:]
                o1, o2 = outs[pos], outs[pos + 1]
                pos += 2
                t2 = [*trail, _step(h1, o1), _step(h2, o2)]
                if o1.fail and o2.fail:
                    worst = o1 if o1.rel <= o2.rel else o2
                    suspects.append(Suspect("common", members, worst, t2))
                elif o1.fail or o2.fail:
                    bad, good, o = (h1, h2, o1) if o1.fail else (h2, h1, o2)
                    nxt.append((bad, o, int(good[0]), t2, False))
                else:
                    suspects.append(Suspect("unresolved", members, out, t2))
            else:
                o = outs[pos]
                pos += 1
                member_seen.add(idx)
                trail.append({"gpus": 2, "pair_with_reference": True, "rel": round(o.rel, 4),
                              "fail": o.fail})
                if o.fail:
                    member_hits.setdefault(idx, []).append((m, o))
        for idx in member_seen:
            members, out, ref, trail, outside = pending[idx]
            hits = member_hits.get(idx, [])
            if len(hits) == len(members) and len(members) >= 2:
                if outside:
                    worst = min((o for _, o in hits), key=lambda o: o.rel)
                    suspects.append(Suspect("common", members, worst, trail))
                    continue
                if ref is None:
                    hits = []  # every pairing failed and no reference: cannot tell which
            if not hits:
                suspects.append(Suspect("unresolved", members, out, trail))
            for m, o in hits:
                suspects.append(Suspect("member", np.asarray([m]), o, trail))
        pending = nxt
    return suspects, tests
