"""Stage 4, multi-rack: all-reduces with NVLink off (every byte on the scale-out network),
then with NVLink on; comparing the two says which fabric a shortfall belongs to.

NVLink off, the first tests are one ring per leaf switch (the GPUs of all racks under it on
its rail). A failing ring is split: both halves short = the leaf; one half short = recurse;
a few GPUs left = each against a known-good GPU, naming its NIC and cable. Rings per rail
across each region's leaves and across regions then exercise the spines."""

from __future__ import annotations

import numpy as np

from rackscale.certify.campaign import ProbeFailed
from rackscale.certify.findings import Finding
from rackscale.certify.localize import bisect
from rackscale.certify.state import DOWN_REL, RunState, split_by
from rackscale.certify.verdict import FAIL
from rackscale.fleet import NICS
from rackscale.provenance import Provenance

SCALEOUT_SPEC_EFFICIENCY = 0.9  # spec floor: 90% of NIC line rate as all-reduce busbw
HIER_TOLERANCE = 0.9  # NVLink-on multi-rack below 90% of what its parts predict = NVLink short


def _nic_spec(st: RunState, groups: list[np.ndarray]) -> np.ndarray:
    topo = st.topo
    return np.asarray([NICS[topo.racks[int(topo.gpu_rack[g[0]])].template.nic].gbit_s / 8
                       * SCALEOUT_SPEC_EFFICIENCY for g in groups])


def run_stage_multirack(st: RunState) -> None:
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    leaves, groups = split_by(gpus, topo.gpu_leaf[gpus])
    if not groups:
        return
    for g in groups:
        st.ran[4][g] = True
    st.ok[np.setdiff1d(gpus, np.concatenate(groups))] = False
    st.note(4, f"NVLink-off all-reduce on {len(groups)} leaf rings")
    failed_gpus: list[np.ndarray] = []
    try:
        j, s = st.judge_groups("scaleout_allreduce", groups,
                               spec_ref=_nic_spec(st, groups), learn=True)
        bad = np.flatnonzero(j.failed)
        on_rel: dict[int, float] = {}
        if len(bad) and "nvlink_allreduce" in st.refs:
            # The same rings with NVLink on, against what a hierarchical all-reduce of healthy
            # parts would give: NVLink on hides much of a scale-out fault, NVLink off shows it.
            sub = [groups[i] for i in bad]
            j_on, _ = st.judge_groups("nvlink_allreduce", sub, spec_ref=None,
                                      learn=False)
            for p, i in enumerate(bad):
                expected = _hier_expected(st, sub[p])
                on_rel[int(i)] = float(np.nan_to_num(j_on.median[p])) / expected
        st.note(4, f"{len(bad)} leaf rings short; bisecting")
        # A reference GPU for small rings: one on the same rail under a leaf that passed.
        good_rail: dict[tuple[int, int], int] = {}
        for i in np.flatnonzero(~j.failed):
            g0 = int(groups[i][0])
            good_rail.setdefault((int(topo.gpu_region[g0]), int(topo.gpu_slot[g0])), g0)
        failing = [(groups[i], st.outcome(j, int(i), s), good_rail.get(
            (int(topo.gpu_region[groups[i][0]]), int(topo.gpu_slot[groups[i][0]])))
            if len(groups[i]) < 4 else None) for i in bad]
        suspects, _ = bisect(failing, st.tester("scaleout_allreduce"))
        for sp in suspects:
            g0 = int(sp.members[0])
            leaf_no = int(topo.gpu_leaf[g0])
            ring = int(np.flatnonzero(leaves == leaf_no)[0])
            compare = {"fabric": "scaleout", "nvlink_off_rel": round(float(j.rel[ring]), 4),
                       "trail": sp.trail}
            if ring in on_rel:
                compare["nvlink_on_rel"] = round(on_rel[ring], 4)
            if sp.kind == "member":
                kind = "nic_dead" if sp.outcome.fail_rel <= DOWN_REL else "bad_cable"
                st.finding_outcome(topo.ids[int(topo.gpu_nic[g0])], kind, 4, sp.outcome,
                                   compare | {"gpu": topo.gpu_ids[g0]})
                failed_gpus.append(sp.members)
            elif sp.kind == "common":
                kind = "leaf_down" if sp.outcome.fail_rel <= DOWN_REL else "leaf_degraded"
                st.finding_outcome(topo.leaves[leaf_no], kind, 4, sp.outcome, compare)
                failed_gpus.append(groups[ring])
            else:
                st.findings.append(Finding(component=topo.leaves[leaf_no], kind="unlocalized",
                                           stage=4, confidence=0.5, evidence=compare))
                failed_gpus.append(groups[ring])
        if failed_gpus:
            st.ok[np.concatenate(failed_gpus)] = False
        _spine_rings(st)
        _nvlink_on(st)
    except ProbeFailed as err:
        st.probe_error(4, err, topo.spec.name)
        st.ok[gpus] = False
        return
    st.passed[4][np.flatnonzero(st.ok & st.ran[4])] = True


def _hier_expected(st: RunState, g: np.ndarray) -> float:
    """Hierarchical all-reduce busbw that healthy parts give: each GPU carries 1/D of the
    data over its NIC after an NVLink reduce-scatter inside its domain."""
    k = int(st.sku_idx[g[0]])
    nv = st.refs["nvlink_allreduce"][k][0]
    so = st.refs["scaleout_allreduce"][k][0]
    n_dom = len(np.unique(st.topo.gpu_domain[g]))
    if n_dom == 1:
        return nv
    return 1.0 / (1.0 / nv + 1.0 / (len(g) / n_dom * so))


def _spine_rings(st: RunState) -> None:
    """Rings per rail across a region's leaves and across regions (through the spines)."""
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    rail_key = topo.gpu_region[gpus].astype(np.int64) * 1000 + topo.gpu_slot[gpus]
    groups = []
    for key, g in zip(*split_by(gpus, rail_key), strict=True):
        del key
        if len(np.unique(topo.gpu_leaf[g])) >= 2:
            groups.append(g)
    if len(topo.regions) > 1:
        for _, g in zip(*split_by(gpus, topo.gpu_slot[gpus].astype(np.int64)), strict=True):
            if len(np.unique(topo.gpu_region[g])) >= 2:
                groups.append(g)
    if not groups:
        return
    st.note(4, f"NVLink-off rings through the spines: {len(groups)}")
    j, _ = st.judge_groups("scaleout_allreduce", groups, spec_ref=None, learn=False)
    for i in np.flatnonzero(j.verdict == FAIL):
        g = groups[i]
        st.findings.append(Finding(
            component=topo.regions[int(topo.gpu_region[g[0]])], kind="unlocalized", stage=4,
            confidence=0.5, evidence={"fabric": "scaleout", "note": "spine-level ring short "
                                      "while every leaf ring passed", "rel": float(j.rel[i])}))
        st.ok[g] = False


def _nvlink_on(st: RunState) -> None:
    """NVLink on across racks, per region and fleet-wide, against what NVLink and scale-out
    figures measured earlier predict for a hierarchical all-reduce."""
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    regions, groups = split_by(gpus, topo.gpu_region[gpus].astype(np.int64))
    groups = [g for g in groups if len(np.unique(topo.gpu_domain[g])) >= 2]
    if len(regions) > 1 and len(np.unique(topo.gpu_domain[gpus])) >= 2:
        groups.append(gpus)
    if not groups or "nvlink_allreduce" not in st.refs:
        return
    st.note(4, f"NVLink-on multi-rack all-reduce on {len(groups)} groups")
    so = np.asarray([st.refs["scaleout_allreduce"][int(k)][0] for k in st.group_keys(groups)])
    expected = np.asarray([_hier_expected(st, g) for g in groups])
    j, _ = st.judge_groups("nvlink_allreduce", groups, spec_ref=None, learn=False)
    for i, g in enumerate(groups):
        got = float(np.nan_to_num(j.median[i]))
        off = float(so[i])
        short = got < HIER_TOLERANCE * expected[i]
        st.fabric.append({
            "scope": "fleet" if i >= len(regions) or len(np.unique(topo.gpu_region[g])) > 1
            else topo.regions[int(topo.gpu_region[g[0]])],
            "gpus": len(g), "nvlink_on_busbw": round(got, 1),
            "nvlink_on_expected": round(float(expected[i]), 1),
            "nvlink_off_busbw": round(off, 1), "shortfall": "nvlink" if short else "none",
            Provenance(st.backend.name).basis: True})
        if short:
            st.findings.append(Finding(
                component=topo.regions[int(topo.gpu_region[g[0]])], kind="unlocalized",
                stage=4, confidence=0.6, evidence=st.fabric[-1] | {"fabric": "nvlink"}))
            st.ok[g] = False
