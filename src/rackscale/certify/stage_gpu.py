"""Stage 1, per GPU: GEMM (TFLOPS and a verified result), HBM bandwidth, and the racks'
thermal and power telemetry. A rack whose coolant flow is short explains its GPUs' slow GEMMs
(one coolant_flow_low finding, not 72 slow_gpu findings)."""

from __future__ import annotations

import numpy as np

from rackscale.certify.campaign import ProbeFailed
from rackscale.certify.measure import Scope
from rackscale.certify.state import DOWN_REL, RunState
from rackscale.certify.verdict import THRESHOLDS, Baseline, fleet_baseline, judge, repeat_median

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
    jg = judge(gemm.samples, gemm.error_mask, gemm.errors,
               fleet_baseline(repeat_median(gemm.samples, gemm.error_mask), keys),
               THRESHOLDS["gemm"], spec_value=peak)
    checksum_bad = np.stack([~e["checksum_ok"] for e in gemm.extra]) & ~gemm.error_mask
    jh = judge(hbm.samples, hbm.error_mask, hbm.errors,
               fleet_baseline(repeat_median(hbm.samples, hbm.error_mask), keys),
               THRESHOLDS["hbm"], spec_value=bw)
    st.warns += int(((jg.verdict == 1) & ~jg.failed).sum() + (jh.verdict == 1).sum())

    # Rack cooling: flow against need (spec reference 1.0), and throttled clocks.
    jt = judge(thermal.samples, thermal.error_mask, thermal.errors,
               Baseline(np.ones(len(racks)), np.zeros(len(racks)), "spec: needed flow"),
               THRESHOLDS["thermal"])
    clocks = np.stack([e["gpu_clock_frac"] for e in thermal.extra])
    rack_of_t = topo.gpu_rack[thermal.extra[0]["gpus"]]
    cooled_bad: set[int] = set()
    gpu_pos = {int(g): p for p, g in enumerate(gpus)}
    for r_pos, r in enumerate(racks):
        rack = topo.racks[int(r)]
        rack_gpus = np.asarray([gpu_pos[g] for g in range(rack.gpu_first, rack.gpu_end)
                                if g in gpu_pos])
        clock = float(np.nanmedian(clocks[:, rack_of_t == r])) if len(rack_gpus) else 1.0
        slow_share = float(jg.failed[rack_gpus].mean()) if len(rack_gpus) else 0.0
        if jt.failed[r_pos] or (clock < CLOCK_THROTTLED and slow_share >= 0.5):
            cooled_bad.add(int(r))
            st.finding_from(f"{rack.id}/cdu", "coolant_flow_low", 1, jt, r_pos, "fraction "
                            "of needed flow", thermal.source, {
                                "flow_lpm": round(float(np.nanmedian(
                                    [e["flow_lpm"][r_pos] for e in thermal.extra])), 1),
                                "required_lpm": round(float(rack.required_flow_lpm), 1),
                                "gpu_clock_frac_median": round(clock, 3),
                                "gpus_throttled": int(jg.failed[rack_gpus].sum())})
        # Power shelves: each against its rack's other shelves, repeat by repeat.
        kw = np.stack([e["shelf_kw"][r_pos] for e in thermal.extra])  # [repeats, shelves]
        with np.errstate(all="ignore"):
            rel = kw / np.nanmedian(kw, axis=1, keepdims=True)
        for k in range(rack.template.power_shelves):
            down = ~(rel[:, k] >= SHELF_DOWN_REL)
            if down.any():
                st.finding(f"{rack.id}/ps{k + 1}", "power_shelf_down", 1,
                           flapping=not down.all(), confidence=0.99 if down.all() else 0.8,
                           rel=float(np.nanmedian(rel[down, k])), hard_fails=int(down.sum()),
                           evidence={thermal.source: True, "shelf_kw": round(float(
                               np.nanmedian(kw[:, k])), 2), "peer_kw": round(float(
                                   np.nanmedian(kw)), 2), "unit": "kW"})

    failed = np.zeros(len(gpus), bool)
    for p, g in enumerate(gpus):
        gid = topo.gpu_ids[g]
        err_n = int(gemm.error_mask[:, p].sum())
        sdc_n = int(checksum_bad[:, p].sum())
        in_hot_rack = int(topo.gpu_rack[g]) in cooled_bad
        if err_n:
            failed[p] = True
            st.finding(gid, "gpu_dead", 1, flapping=err_n < st.config.repeats, confidence=0.99,
                       rel=0.0, hard_fails=err_n,
                       evidence={gemm.source: True, "error": gemm.errors.get(p, ""),
                                 "repeats_errored": err_n})
            continue
        if sdc_n:
            failed[p] = True
            st.finding(gid, "sdc", 1, flapping=sdc_n < st.config.repeats, confidence=0.99,
                       rel=0.0, hard_fails=sdc_n,
                       evidence={gemm.source: True, "check": "sum(C) == (1^T A)(B 1)",
                                 "repeats_wrong": sdc_n, "tflops": round(float(
                                     jg.median[p]), 1)})
        if jg.failed[p]:
            failed[p] = True
            if not in_hot_rack:
                st.finding_from(gid, "slow_gpu", 1, jg, p, gemm.unit, gemm.source)
        if jh.failed[p]:
            failed[p] = True
            kind = "gpu_dead" if jh.fail_rel(p) <= DOWN_REL else "hbm_degraded"
            st.finding_from(gid, kind, 1, jh, p, hbm.unit, hbm.source)
    st.passed[1][gpus[~failed]] = True
    st.ok[gpus[failed]] = False
