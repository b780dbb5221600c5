"""Stage 4, multi-rack: all-reduces with NVLink off (every byte on the scale-out network),
then with NVLink on; comparing the two says which fabric a shortfall belongs to.

NVLink off, the first tests are one ring per leaf switch and NIC link class: the GPUs of all
racks under the leaf on its rail whose NICs run at one rate. A ring runs at its slowest link,
so a ring that mixed NIC speeds would hide a fault on its faster side. A failing ring is
split: both halves short = the leaf; one half short = recurse; a few GPUs left = each against
a known-good GPU of the same link class, naming its NIC and cable. Rings per rail and link
class across each region's leaves and across regions then exercise the spines.

Every expectation is the hardware model's for the group's own members and links
(certify.expect), and a shortfall no single part explains is blamed on the smallest scope
that holds the whole group (its rack, its region, or the fleet)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from rackscale.certify.campaign import ProbeFailed
from rackscale.certify.findings import Finding
from rackscale.certify.localize import Outcome, Suspect, bisect
from rackscale.certify.state import DOWN_REL, RunState, split_by
from rackscale.certify.verdict import FAIL, Judgement
from rackscale.provenance import Provenance

HIER_TOLERANCE = 0.9  # NVLink-on multi-rack below 90% of what its parts predict = NVLink short


def run_stage_multirack(st: RunState) -> None:
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    keys, groups = split_by(gpus, _ring_key(st, gpus, topo.gpu_leaf[gpus]))
    if not groups:
        return
    for g in groups:
        st.ran[4][g] = True
    lone = np.setdiff1d(gpus, np.concatenate(groups))
    st.ok[lone] = False  # until paired with a known-good GPU below
    st.note(4, f"NVLink-off all-reduce on {len(groups)} leaf rings")
    try:
        j, s = st.judge_groups("scaleout_allreduce", groups, learn=True)
        bad = np.flatnonzero(j.failed)
        on_rel: dict[int, float] = {}
        if len(bad) and "nvlink" in st.learned:
            # The same rings with NVLink on, against what a hierarchical all-reduce of healthy
            # parts would give: NVLink on hides much of a scale-out fault, NVLink off shows it.
            j_on, _ = st.judge_groups("nvlink_allreduce", [groups[i] for i in bad],
                                      learn=False)
            on_rel = {int(i): float(np.nan_to_num(j_on.rel[p])) for p, i in enumerate(bad)}
        st.note(4, f"{len(bad)} leaf rings short; bisecting")
        # A reference GPU for small rings: one of the same rail and link class under a leaf
        # that passed (a slower reference would set the pair's pace and hide the member).
        good: dict[tuple[int, int, int], int] = {}
        for i in np.flatnonzero(~j.failed):
            g0 = int(groups[i][0])
            good.setdefault(_rail_class(st, g0), g0)
        failing = [(groups[i], st.outcome(j, int(i), s),
                    good.get(_rail_class(st, int(groups[i][0]))) if len(groups[i]) < 4
                    else None) for i in bad]
        found, _ = bisect(failing, st.tester("scaleout_allreduce"))
        ring_of = {int(k): i for i, k in enumerate(keys)}
        # a leaf ring whose every retest passed was a stall of a shared host, not a part
        suspects, passed = st.cleared("scaleout_allreduce", found)
        suspects = _chase_flaps(st, suspects, passed, good)
        failed_gpus = [_blame(st, sp, groups, ring_of, j, on_rel) for sp in suspects]
        if failed_gpus:
            st.ok[np.concatenate(failed_gpus)] = False
        _lone_gpus(st, lone, good, {int(topo.gpu_leaf[groups[i][0]]) for i in
                                    np.flatnonzero(~j.failed)})
        for g, out, finding in _spine_rings(st):
            named = _chase_spine_ring(st, g, out)
            # a lone GPU has no leaf ring to be blamed through: the ring stays unlocalized
            if named is not None and int(named.members[0]) not in lone:
                st.ok[_blame(st, named, groups, ring_of, j, on_rel)] = False
            else:
                st.findings.append(finding)
                st.ok[g] = False
        _nvlink_on(st)
    except ProbeFailed as err:
        st.probe_error(4, err, topo.spec.name)
        st.ok[gpus] = False
        return
    st.passed[4][np.flatnonzero(st.ok & st.ran[4])] = True


# A repeat at this fraction of its reference or below, between healthy repeats, is a link
# that went down and came back (a stalled iteration: TCP held it for seconds), not a shared
# host's stall (a few scheduler slices cost a repeat far less).
FLAP_DOWN_REL = 0.25
# Retests of a flapping suspect. A pair test can be far shorter than a flap's up phase, so
# several in a row may all land in up phases; eight tries leave (1/2)^8 < 0.5% to a NIC up
# half of the time, and a part that persists is named on the first.
FLAP_TRIES = 8


def _flapped_down(o: Outcome) -> bool:
    """The group went down in some repeats and ran healthy in others."""
    return o.flapping and o.fail_rel <= FLAP_DOWN_REL


def _unresolved_flap(sp: Suspect) -> bool:
    return sp.kind == "unresolved" and _flapped_down(sp.outcome)


def _chase_flaps(st: RunState, suspects: list[Suspect], passed: list[Suspect],
                 good: dict[tuple[int, int, int], int]) -> list[Suspect]:
    """The suspects to report. An unresolved one whose ring went down in some repeats and
    not in others (a flap) is bisected again, up to FLAP_TRIES times, until a retest lands in
    a down phase and names the part; so is one cleared as a stall of a shared host with such
    a ring. A flapping dead NIC's pair retests all landed in its up phases: cleared, only a
    spine ring kept failing (named on the whole fleet); or, when the ring's own retest caught
    a down phase, unlocalized on the leaf. One still unnamed stays a suspect (the leaf,
    unlocalized); a cleared one that never flapped stays cleared."""
    out = [sp for sp in suspects if not _unresolved_flap(sp)]
    chase = [sp for sp in suspects if _unresolved_flap(sp)]
    for sp in chase + [sp for sp in passed if _flapped_down(sp.outcome)]:
        ref = good.get(_rail_class(st, int(sp.members[0]))) if len(sp.members) < 4 else None
        named = None
        for _ in range(FLAP_TRIES):
            again, _ = bisect([(sp.members, sp.outcome, ref)], st.tester("scaleout_allreduce"))
            named = next((x for x in again if x.kind != "unresolved"), None)
            if named is not None:
                break
        if named is not None:
            # a retest that fell wholly in a down phase is not flapping by itself; the
            # ring's own repeats saw the part both up and down
            named.outcome = replace(named.outcome, flapping=True)
        out.append(named or sp)
    return out


def _ring_key(st: RunState, gpus: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Ring key of each GPU: `where` (a leaf, a rail of a region, ...) and its NIC's link
    class, so that every ring holds links of one rate."""
    n_cls = len(st.model.classes("scaleout"))
    key: np.ndarray = where.astype(np.int64) * n_cls + st.model.gpu_class("scaleout")[gpus]
    return key


def _rail_class(st: RunState, g: int) -> tuple[int, int, int]:
    """(region, rail, NIC link class) of GPU g: where a like-for-like reference GPU sits."""
    topo = st.topo
    return (int(topo.gpu_region[g]), int(topo.gpu_slot[g]),
            int(st.model.gpu_class("scaleout")[g]))


def _blame(st: RunState, sp: Suspect, groups: list[np.ndarray], ring_of: dict[int, int],
           j: Judgement, on_rel: dict[int, float]) -> np.ndarray:
    """Record the finding a suspect of a leaf ring stands for; returns the GPUs it fails.
    Rings of several link classes under one leaf may all name that leaf: one finding."""
    topo = st.topo
    g0 = int(sp.members[0])
    leaf_no = int(topo.gpu_leaf[g0])
    ring = ring_of[int(_ring_key(st, np.asarray([g0]), np.asarray([leaf_no]))[0])]
    compare: dict[str, object] = {"fabric": "scaleout",
                                  "nvlink_off_rel": round(float(np.nan_to_num(j.rel[ring])), 4),
                                  "trail": sp.trail}
    if ring in on_rel:
        compare["nvlink_on_rel"] = round(on_rel[ring], 4)
    if sp.kind == "member":
        kind = "nic_dead" if sp.outcome.fail_rel <= DOWN_REL else "bad_cable"
        st.finding_outcome(topo.ids[int(topo.gpu_nic[g0])], kind, 4, sp.outcome,
                           compare | {"gpu": topo.gpu_ids[g0]})
        return sp.members
    leaf = topo.leaves[leaf_no]
    if sp.kind == "common":
        kind = "leaf_down" if sp.outcome.fail_rel <= DOWN_REL else "leaf_degraded"
    else:
        kind = "unlocalized"
    if not any(f.component == leaf and f.kind == kind for f in st.findings):
        if kind == "unlocalized":
            st.findings.append(Finding(component=leaf, kind=kind, stage=4, confidence=0.5,
                                       evidence=compare))
        else:
            st.finding_outcome(leaf, kind, 4, sp.outcome, compare)
    return groups[ring]


def _lone_gpus(st: RunState, lone: np.ndarray, good: dict[tuple[int, int, int], int],
               passed_leaves: set[int]) -> None:
    """A GPU alone of its link class under its leaf on its rail has no ring: pair it with a
    known-good GPU of its rail and class (its region's, else another's). A short pair names
    its NIC when another ring under the same leaf passed (the leaf is fine), else the leaf
    cannot be told from the cable: unlocalized on the leaf."""
    topo = st.topo
    anywhere = {(rail, cls): g for (_, rail, cls), g in sorted(good.items())}
    pairs, who = [], []
    for g in lone.tolist():
        key = _rail_class(st, g)
        ref = good.get(key, anywhere.get(key[1:]))
        if ref is not None:
            pairs.append(np.asarray([g, ref]))
            who.append(g)
    if not pairs:
        return
    st.note(4, f"{len(pairs)} GPUs alone of their link class under a leaf: paired")
    j, s = st.judge_groups("scaleout_allreduce", pairs, learn=False)
    st.ran[4][who] = True
    st.ok[who] = True
    short = [i for i in range(len(who)) if j.failed[i]]
    if short:
        # as for the spine rings: a short pair is measured again, and only a shortfall seen
        # in both samples is reported (a fault persists or flaps; a host stall rarely twice)
        st.note(4, f"{len(short)} pairs of a lone GPU short; measuring them again")
        again, _ = st.judge_groups("scaleout_allreduce", [pairs[i] for i in short],
                                   learn=False)
        short = [i for k, i in enumerate(short) if again.failed[k]]
    for i in short:
        g = who[i]
        st.ok[g] = False
        out = st.outcome(j, i, s)
        ev = {"fabric": "scaleout", "paired_with": topo.gpu_ids[int(pairs[i][1])]}
        leaf = int(topo.gpu_leaf[g])
        if leaf in passed_leaves:
            kind = "nic_dead" if out.fail_rel <= DOWN_REL else "bad_cable"
            st.finding_outcome(topo.ids[int(topo.gpu_nic[g])], kind, 4, out,
                               ev | {"gpu": topo.gpu_ids[g]})
        else:
            st.findings.append(Finding(component=topo.leaves[leaf], kind="unlocalized",
                                       stage=4, confidence=0.5, evidence=ev | {
                                           "note": "the only GPU under this leaf on its rail"
                                           " is short: its cable or the leaf"}))


def _spine_rings(st: RunState) -> list[tuple[np.ndarray, Outcome, Finding]]:
    """Rings per rail and link class across a region's leaves and across regions (through
    the spines). Every leaf ring passed, so a short spine ring names no part: it is measured
    once more, and only a shortfall seen in both samples is reported (a persistent or
    flapping fault of the spine tier shows in both soak windows; a stall of a shared host,
    which hits a ring of many ranks more than the leaf rings, rarely twice). A ring that went
    down in some repeats (a flapping link) is returned with its finding, for the caller to
    chase to its member first (the others are recorded here)."""
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    rail = topo.gpu_region[gpus].astype(np.int64) * 1000 + topo.gpu_slot[gpus]
    groups = [g for g in split_by(gpus, _ring_key(st, gpus, rail))[1]
              if len(np.unique(topo.gpu_leaf[g])) >= 2]
    if len(topo.regions) > 1:
        groups += [g for g in split_by(gpus, _ring_key(st, gpus, topo.gpu_slot[gpus]))[1]
                   if len(np.unique(topo.gpu_region[g])) >= 2]
    if not groups:
        return []
    st.note(4, f"NVLink-off rings through the spines: {len(groups)}")
    j, sampled = st.judge_groups("scaleout_allreduce", groups, learn=False)
    short = [int(i) for i in np.flatnonzero(j.verdict == FAIL)]
    if not short:
        return []
    st.note(4, f"{len(short)} spine rings short; measuring them again")
    again, _ = st.judge_groups("scaleout_allreduce", [groups[i] for i in short], learn=False)
    flapped = []
    for k, i in enumerate(short):
        if again.verdict[k] != FAIL:
            continue
        g = groups[i]
        finding = Finding(
            component=st.scope_of(g), kind="unlocalized", stage=4, confidence=0.5,
            evidence={"fabric": "scaleout", "note": "spine-level ring short in two samples "
                      "while every leaf ring passed", "rel": round(float(j.rel[i]), 4),
                      "retest_rel": round(float(again.rel[k]), 4),
                      "rel_repeats": [round(float(x), 4) for x in
                                      np.nan_to_num(j.rel_samples[:, i])],
                      "retest_rel_repeats": [round(float(x), 4) for x in
                                             np.nan_to_num(again.rel_samples[:, k])],
                      "gpus": len(g)})
        out = st.outcome(j, i, sampled)
        if _flapped_down(out):
            flapped.append((g, out, finding))  # a link that flaps: the caller chases it
            continue
        st.findings.append(finding)
        st.ok[g] = False
    return flapped


def _chase_spine_ring(st: RunState, g: np.ndarray, out: Outcome) -> Suspect | None:
    """A spine ring that went down in some repeats while every leaf ring passed: its leaf
    rings' tests all fell in a flapping link's up phases. Each other member is paired with
    one member, up to FLAP_TRIES times, until a retest lands in a down phase: one failing
    pair names its other member; every pair failing names the shared member. A spine
    fault fails only the pairs across leaves, which names no one (None: unlocalized)."""
    ref, others = int(g[0]), [int(x) for x in g[1:]]
    if len(others) < 2:
        return None  # one pair cannot tell its two members apart
    test = st.tester("scaleout_allreduce")
    for _ in range(FLAP_TRIES):
        outs = test([np.asarray([x, ref]) for x in others])
        failed = [(x, o) for x, o in zip(others, outs, strict=True) if o.fail]
        if len(failed) == len(others):
            member, worst = ref, min(outs, key=lambda o: o.rel)
        elif len(failed) == 1:
            member, worst = failed[0]
        else:
            continue  # none failed (an up phase), or some: no single member explains it
        trail: list[dict[str, object]] = [
            {"gpus": len(g), "rel": round(out.rel, 4), "fail": True, "spine_ring": True}]
        trail += [{"gpus": 2, "pair_with": ref, "rel": round(o.rel, 4), "fail": o.fail}
                  for o in outs]
        return Suspect("member", np.asarray([member]), replace(worst, flapping=True), trail)
    return None


def _nvlink_on(st: RunState) -> None:
    """NVLink on across racks, per region and fleet-wide, against what the hardware model
    predicts for a hierarchical all-reduce on the NVLink and scale-out rates learned."""
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    regions, groups = split_by(gpus, topo.gpu_region[gpus].astype(np.int64))
    groups = [g for g in groups if len(np.unique(topo.gpu_domain[g])) >= 2]
    if len(regions) > 1 and len(np.unique(topo.gpu_domain[gpus])) >= 2:
        groups.append(gpus)
    if not groups or "nvlink" not in st.learned:
        return
    st.note(4, f"NVLink-on multi-rack all-reduce on {len(groups)} groups")
    expected = st.expected(groups, nvlink=True)
    off = st.expected(groups, nvlink=False)
    j, _ = st.judge_groups("nvlink_allreduce", groups, learn=False)
    medians = np.nan_to_num(j.median).astype(float)
    # the probe's own margin where it is wider (noisy real hardware), else the tolerance
    lines = np.minimum(HIER_TOLERANCE, j.fail_line.astype(float)) * expected
    first = [i for i in range(len(groups)) if medians[i] < lines[i]]
    confirmed = set()
    if first:
        # As for the spine rings: every narrower ring passed, so a short multi-rack group names
        # no part; only a shortfall seen in two samples is reported (a shared host's stall
        # rarely hits the same many-rank group twice; a real fault does).
        st.note(4, f"{len(first)} NVLink-on groups short; measuring them again")
        again, _ = st.judge_groups("nvlink_allreduce", [groups[i] for i in first], learn=False)
        confirmed = {i for k, i in enumerate(first)
                     if float(np.nan_to_num(again.median[k])) < lines[i]}
    for i, g in enumerate(groups):
        got = float(medians[i])
        short = i in confirmed
        scope = st.scope_of(g)
        st.fabric.append({
            "scope": "fleet" if scope == topo.spec.name else scope,
            # 4 significant digits: GB/s figures run from a CPU lab's 0.02 to NVL72's 900
            "gpus": len(g), "nvlink_on_busbw": _sig4(got),
            "nvlink_on_expected": _sig4(float(expected[i])),
            "nvlink_off_busbw": _sig4(float(off[i])),
            "shortfall": "nvlink" if short else "none",
            Provenance(st.backend.name).basis: True})
        if short:
            st.findings.append(Finding(
                component=scope, kind="unlocalized", stage=4, confidence=0.6,
                evidence=st.fabric[-1] | {"fabric": "nvlink"}))
            st.ok[g] = False


def _sig4(x: float) -> float:
    return float(f"{x:.4g}") if np.isfinite(x) else 0.0
