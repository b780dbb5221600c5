"""Stages 2 and 3, NVLink on: an all-reduce per tray (node), then per NVLink domain.

When most trays of a domain fall short together, the domain's switch trays are suspect and
their per-plane bandwidth names the one at fault; otherwise a failing tray or domain is split
until one GPU's NVLink port is left (localize.bisect)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from rackscale.certify.campaign import ProbeFailed
from rackscale.certify.findings import Finding
from rackscale.certify.localize import Outcome, bisect
from rackscale.certify.measure import Scope
from rackscale.certify.state import DOWN_REL, RunState, split_by
from rackscale.certify.verdict import Baseline, judge
from rackscale.faults import NVLINK_PORT_DOWN, NVLINK_SWITCH_DEGRADED, NVLINK_SWITCH_DOWN


def _check_planes(st: RunState, domains: list[int], stage: int) -> set[int]:
    """Per-plane test of suspect domains; returns the domains whose switch trays explain it."""
    if not domains:
        return set()
    why = st.backend.why_not("nvlink_plane")
    if why is not None:
        # No per-plane figures here (the lab, a host without NVSwitch telemetry): the
        # shortfall stays unexplained (an unlocalized domain), not a probe error that would
        # fail every GPU of the stage.
        st.note(stage, f"no per-switch-tray check of {len(domains)} domains: {why}")
        return set()
    topo = st.topo
    d_arr = np.asarray(sorted(domains))
    s = st.sample("nvlink_plane", Scope(domains=d_arr), len(d_arr))
    samples = np.stack([e["gbps"] for e in s.extra])  # [repeats, domains, planes]
    r, nd, npl = samples.shape
    flat = samples.reshape(r, nd * npl)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # padding planes of smaller domains
        ref = np.nanmedian(np.nanmedian(samples, axis=0), axis=1)  # per domain
    valid = np.isfinite(flat).all(axis=0)
    bl = Baseline(np.repeat(ref, npl), np.full(nd * npl, 0.01), "median plane of the domain")
    j = judge(np.where(valid, flat, 1.0), np.zeros_like(flat, bool), {}, bl,
              st.config.thresholds["nvlink_plane"])
    explained: set[int] = set()
    for pos in np.flatnonzero(j.failed & valid):
        d, k = divmod(int(pos), npl)
        kind = NVLINK_SWITCH_DOWN if j.fail_rel(int(pos)) <= DOWN_REL else NVLINK_SWITCH_DEGRADED
        st.finding_from(topo.domain_switches[int(d_arr[d])][k], kind, stage, j, int(pos),
                        "GB/s", s.source, {"fabric": "nvlink", "domain": topo.domains[
                            int(d_arr[d])]})
        explained.add(int(d_arr[d]))
    return explained


def _localize_members(st: RunState, failing: Sequence[tuple[np.ndarray, Outcome, int | None]],
                      stage: int) -> tuple[list[int], list[np.ndarray]]:
    """Bisect failing NVLink groups; returns the domains left to check plane by plane and
    the groups whose shortfall no retest reproduced (they pass: `RunState.cleared`)."""
    found, _ = bisect(failing, st.tester("nvlink_allreduce"))
    suspects, passed = st.cleared("nvlink_allreduce", found)
    if passed:
        st.note(stage, f"{len(passed)} short groups passed every retest")
    domains = []
    for sp in suspects:
        g = int(sp.members[0])
        if sp.kind == "member":
            st.finding_outcome(st.topo.gpu_ids[g], NVLINK_PORT_DOWN, stage, sp.outcome,
                               {"fabric": "nvlink", "trail": sp.trail})
        else:
            domains.append(int(st.topo.gpu_domain[g]))
    return domains, [sp.members for sp in passed]


def run_stage_tray(st: RunState) -> None:
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    _trays, groups = split_by(gpus, topo.gpu_tray[gpus])
    for g in groups:
        st.ran[2][g] = True
    dropped = np.setdiff1d(gpus, np.concatenate(groups) if groups else gpus)
    st.ok[dropped] = False  # a tray with one GPU left cannot run a collective
    if not groups:
        return
    st.note(2, f"NVLink all-reduce on {len(groups)} trays")
    try:
        j, _s = st.judge_groups("nvlink_allreduce", groups, learn=True)
        dom = np.asarray([topo.gpu_domain[g[0]] for g in groups])
        suspects = []
        for d in np.unique(dom[j.failed]):
            mine = dom == d
            if j.failed[mine].sum() >= 2 and j.failed[mine].mean() >= st.config.domain_fraction:
                suspects.append(int(d))
        st.note(2, f"{int(j.failed.sum())} trays short; checking {len(suspects)} domains")
        explained = _check_planes(st, suspects, 2)
        failing = []
        for i in np.flatnonzero(j.failed):
            if int(dom[i]) in explained:
                continue
            ref = next((int(groups[x][0]) for x in np.flatnonzero(~j.failed & (dom == dom[i]))),
                       None)
            failing.append((groups[i], st.outcome(j, int(i), _s), ref))
        leftover, cleared = _localize_members(st, failing, 2)
        for d in set(leftover) - explained:
            if not _check_planes(st, [d], 2):
                st.findings.append(_unlocalized(topo.domains[d], 2, "nvlink"))
    except ProbeFailed as err:
        st.probe_error(2, err, topo.spec.name)
        st.ok[gpus] = False
        return
    passed = ~j.failed | _is_cleared(groups, cleared)
    for n, g in enumerate(groups):
        if not passed[n] or int(topo.gpu_domain[g[0]]) in explained:
            st.ok[g] = False  # escalation: the tray stops here
        else:
            st.passed[2][g] = True


def run_stage_domain(st: RunState) -> None:
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    _doms, groups = split_by(gpus, topo.gpu_domain[gpus])
    if not groups:
        return
    for g in groups:
        st.ran[3][g] = True
    st.note(3, f"NVLink all-reduce on {len(groups)} domains")
    try:
        j, s = st.judge_groups("nvlink_allreduce", groups, learn=True)
        failing = [(groups[i], st.outcome(j, int(i), s), None) for i in np.flatnonzero(j.failed)]
        leftover, cleared = _localize_members(st, failing, 3)
        explained = _check_planes(st, sorted(set(leftover)), 3)
        for d in set(leftover) - explained:
            st.findings.append(_unlocalized(topo.domains[d], 3, "nvlink"))
    except ProbeFailed as err:
        st.probe_error(3, err, topo.spec.name)
        st.ok[gpus] = False
        return
    passed = ~j.failed | _is_cleared(groups, cleared)
    for i, g in enumerate(groups):
        if not passed[i]:
            st.ok[g] = False
        else:
            st.passed[3][g] = True


def _is_cleared(groups: list[np.ndarray], cleared: list[np.ndarray]) -> np.ndarray:
    """Which groups are among `cleared` (the same members)."""
    keys = {tuple(sorted(int(x) for x in c)) for c in cleared}
    return np.asarray([tuple(sorted(int(x) for x in g)) in keys for g in groups], bool)


def _unlocalized(component: str, stage: int, fabric: str) -> Finding:
    return Finding(component=component, kind="unlocalized", stage=stage, confidence=0.5,
                   evidence={"fabric": fabric, "note": "group fails but no single part "
                             "explains it (several faults in one group?)"})
