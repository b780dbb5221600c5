"""Stage 1, per GPU: GEMM (TFLOPS and a verified result), HBM bandwidth, and the racks'
thermal and power telemetry. A rack whose coolant flow is short explains its GPUs' slow GEMMs
(one coolant_flow_low finding, not 72 slow_gpu findings)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from rackscale.certify.campaign import ProbeFailed, Sampled
from rackscale.certify.measure import Scope
from rackscale.certify.state import DOWN_REL, RunState
from rackscale.certify.verdict import (
    WARN,
    Baseline,
    Judgement,
    fleet_baseline,
    judge,
    repeat_median,
)
from rackscale.faults import (
    COOLANT_FLOW_LOW,
    GPU_DEAD,
    HBM_DEGRADED,
    POWER_SHELF_DOWN,
    SDC,
    SLOW_GPU,
)

CLOCK_THROTTLED = 0.97  # rack median clock below this fraction of nominal = throttled
SHELF_DOWN_REL = 0.5  # a shelf delivering under half its peers' power is down


def run_stage_gpu(st: RunState) -> None:
    topo = st.topo
    gpus = np.flatnonzero(st.ok)
    st.ran[1][gpus] = True
    st.note(1, f"GEMM, HBM and thermal on {len(gpus)} GPUs")
    try:
        gemm = st.sample("gemm", Scope(gpus=gpus), len(gpus))
        hbm = st.sample("hbm", Scope(gpus=gpus), len(gpus))
        racks = np.unique(topo.gpu_rack[gpus])
        thermal = st.sample("thermal", Scope(racks=racks), len(racks))
    except ProbeFailed as err:
        st.probe_error(1, err, topo.spec.name)
        st.ok[gpus] = False
        return
    keys = st.sku_idx[gpus].astype(np.int64)
    peak = st.spec(gpus, "bf16_dense_tflops")
    bw = st.spec(gpus, "hbm_tbps")
    judged = _GpuJudgement(
        gpus=gpus, gemm=gemm, hbm=hbm,
        gemm_verdict=judge(gemm.samples, gemm.error_mask, gemm.errors,
                           fleet_baseline(repeat_median(gemm.samples, gemm.error_mask), keys),
                           st.config.thresholds["gemm"], spec_value=peak),
        hbm_verdict=judge(hbm.samples, hbm.error_mask, hbm.errors,
                          fleet_baseline(repeat_median(hbm.samples, hbm.error_mask), keys),
                          st.config.thresholds["hbm"], spec_value=bw),
        checksum_bad=np.stack([~e["checksum_ok"] for e in gemm.extra]) & ~gemm.error_mask)
    st.warns += int((judged.gemm_verdict.verdict == WARN).sum()
                    + (judged.hbm_verdict.verdict == WARN).sum())
    hot_racks = _cooling_findings(st, racks, thermal, judged)
    _power_shelf_findings(st, racks, thermal)
    failed = _gpu_findings(st, judged, hot_racks)
    st.passed[1][gpus[~failed]] = True
    st.ok[gpus[failed]] = False


@dataclass(frozen=True, slots=True)
class _GpuJudgement:
    """Stage 1's per-GPU samples and verdicts, as the finding steps read them."""

    gpus: np.ndarray
    gemm: Sampled
    hbm: Sampled
    gemm_verdict: Judgement
    hbm_verdict: Judgement
    checksum_bad: np.ndarray  # [repeats, gpus]: a GEMM result that failed its check


def _cooling_findings(st: RunState, racks: np.ndarray, thermal: Sampled,
                      judged: _GpuJudgement) -> set[int]:
    """Rack cooling: flow against need (spec reference 1.0), and throttled clocks. One
    coolant_flow_low finding per hot rack; returns the hot racks' numbers."""
    topo, gpus, jg = st.topo, judged.gpus, judged.gemm_verdict
    jt = judge(thermal.samples, thermal.error_mask, thermal.errors,
               Baseline(np.ones(len(racks)), np.zeros(len(racks)), "spec: needed flow"),
               st.config.thresholds["thermal"])
    # Vectorised per rack (a 128k-GPU fleet has ~1,800 racks): mean clock of the rack's
    # GPUs (telemetry lists them rack by rack, in `racks` order) and share of slow GEMMs.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a dead GPU reports no clock
        clocks = np.nanmean(np.stack([e["gpu_clock_frac"] for e in thermal.extra]), axis=0)
    t_gpus = thermal.extra[0]["gpus"]
    t_starts = np.searchsorted(topo.gpu_rack[t_gpus], racks)
    finite = np.isfinite(clocks)
    with np.errstate(all="ignore"):
        rack_clock = np.add.reduceat(np.where(finite, clocks, 0.0), t_starts) / \
            np.maximum(np.add.reduceat(finite.astype(float), t_starts), 1)
    g_starts = np.searchsorted(topo.gpu_rack[gpus], racks)
    slow_n = np.add.reduceat(jg.failed.astype(np.int64), g_starts)
    slow_share = slow_n / np.maximum(np.diff(np.append(g_starts, len(gpus))), 1)
    hot = jt.failed | ((rack_clock < CLOCK_THROTTLED) & (slow_share >= 0.5))
    for r_pos in np.flatnonzero(hot):
        rack = topo.racks[int(racks[r_pos])]
        st.finding_from(f"{rack.id}/cdu", COOLANT_FLOW_LOW, 1, jt, int(r_pos),
                        "fraction of needed flow", thermal.source, {
                            "flow_lpm": round(float(np.nanmedian(
                                [e["flow_lpm"][r_pos] for e in thermal.extra])), 1),
                            "required_lpm": round(float(rack.required_flow_lpm), 1),
                            "gpu_clock_frac_median": round(float(rack_clock[r_pos]), 3),
                            "gpus_throttled": int(slow_n[r_pos])})
    return {int(racks[i]) for i in np.flatnonzero(hot)}


def _power_shelf_findings(st: RunState, racks: np.ndarray, thermal: Sampled) -> None:
    """Power shelves: each against its rack's other shelves, repeat by repeat."""
    topo = st.topo
    kw = np.stack([e["shelf_kw"] for e in thermal.extra])  # [repeats, racks, shelves]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rel = kw / np.nanmedian(kw, axis=2, keepdims=True)
    down = ~(rel >= SHELF_DOWN_REL) & np.isfinite(kw)
    for r_pos, k in zip(*np.nonzero(down.any(axis=0)), strict=True):
        rack = topo.racks[int(racks[r_pos])]
        d = down[:, r_pos, k]
        st.finding(f"{rack.id}/ps{k + 1}", POWER_SHELF_DOWN, 1, flapping=not d.all(),
                   confidence=0.99 if d.all() else 0.8,
                   rel=float(np.nanmedian(rel[d, r_pos, k])), hard_fails=int(d.sum()),
                   evidence={thermal.source: True, "unit": "kW",
                             "shelf_kw": round(float(np.nanmedian(kw[:, r_pos, k])), 2),
                             "peer_kw": round(float(np.nanmedian(kw[:, r_pos])), 2)})


def _gpu_findings(st: RunState, judged: _GpuJudgement, hot_racks: set[int]) -> np.ndarray:
    """Per GPU: dead, silent data corruption, slow (unless its rack runs hot), HBM. Returns
    which of the stage's GPUs failed."""
    topo, gpus, gemm, hbm = st.topo, judged.gpus, judged.gemm, judged.hbm
    jg, jh, checksum_bad = judged.gemm_verdict, judged.hbm_verdict, judged.checksum_bad
    repeats = st.config.repeats
    failed = np.zeros(len(gpus), bool)
    suspects = gemm.error_mask.any(axis=0) | checksum_bad.any(axis=0) | jg.failed | jh.failed
    for p in map(int, np.flatnonzero(suspects)):
        g = int(gpus[p])
        gid = topo.gpu_ids[g]
        err_n = int(gemm.error_mask[:, p].sum())
        sdc_n = int(checksum_bad[:, p].sum())
        if err_n:
            failed[p] = True
            st.finding(gid, GPU_DEAD, 1, flapping=err_n < repeats, confidence=0.99,
                       rel=0.0, hard_fails=err_n,
                       evidence={gemm.source: True, "error": gemm.errors.get(p, ""),
                                 "repeats_errored": err_n, "repeats": repeats})
            continue
        if sdc_n:
            failed[p] = True
            st.finding(gid, SDC, 1, flapping=sdc_n < repeats, confidence=0.99,
                       rel=0.0, hard_fails=sdc_n,
                       evidence={gemm.source: True, "check": "row sums: C 1 == A (B 1)",
                                 "repeats_wrong": sdc_n, "repeats": repeats,
                                 "tflops": round(float(jg.median[p]), 1)})
        if jg.failed[p]:
            failed[p] = True
            if int(topo.gpu_rack[g]) not in hot_racks:
                st.finding_from(gid, SLOW_GPU, 1, jg, p, gemm.unit, gemm.source)
        if jh.failed[p]:
            failed[p] = True
            kind = GPU_DEAD if jh.fail_rel(p) <= DOWN_REL else HBM_DEGRADED
            st.finding_from(gid, kind, 1, jh, p, hbm.unit, hbm.source)
    return failed
