"""Sweep outputs: a CSV row per swept value and a PNG of ETTR with the Young/Daly line.

matplotlib is imported inside `write_png` (Agg backend: no display needed) so the engine does
not pay for it.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, cast

from rackscale.simresult import SimResult
from rackscale.simulate.results import SIMULATED, SweepResult

CSV_FIELDS = ("param", "value", "ettr_mean", "ettr_ci95", "goodput_scheduling",
              "goodput_runtime", "goodput_program", "goodput_total", "job_mttf_h",
              "interruptions", "lost_recompute_h", "lost_restart_h", "lost_detection_h",
              "lost_waiting_h", "lost_checkpoint_h", "lost_slowdown_h", "young_min", "daly_min",
              "simulated")


def payload(result: SimResult) -> dict[str, Any]:
    """The `simulate.run` event payload of docs/contracts.md: the whole typed result."""
    return result.payload()


def sweep_payload(result: SweepResult, *, fleet: str, job_gpus: int, days: float,
                  trials: int, seed: int) -> dict[str, Any]:
    """The `simulate.sweep` event payload of docs/contracts.md: what the report's sweep
    section draws (per point ETTR with its CI), without the per-cause detail of each run."""
    return {"simulated": True, "fleet": fleet, "param": result.param, "field": result.field,
            "values": list(result.values), "job_gpus": job_gpus, "days": days,
            "trials": trials, "seed": seed,
            "points": [{"value": pt.value, "ettr": pt.ettr.model_dump(),
                        "goodput": pt.goodput.model_dump(), "job_mttf_h": pt.job_mttf_h,
                        "young_min": pt.young_min, "daly_min": pt.daly_min}
                       for pt in result.points],
            "optimum": result.optimum.model_dump(exclude_none=True),
            "young_min": result.young_min, "daly_min": result.daly_min}


def write_csv(sweep: SweepResult, path: Path) -> None:
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(CSV_FIELDS)
        for pt in sweep.points:
            lost = pt.lost_hours_by_cause
            g = pt.goodput
            out.writerow([
                sweep.param, pt.value, f"{pt.ettr.mean:.6f}",
                f"{pt.ettr.ci95:.6f}", f"{g.scheduling:.6f}", f"{g.runtime:.6f}",
                f"{g.program:.6f}", f"{g.total:.6f}", f"{pt.job_mttf_h:.4f}",
                f"{pt.interruptions.mean:.3f}", f"{lost['recompute']:.3f}",
                f"{lost['restart']:.3f}", f"{lost['detection']:.3f}",
                f"{lost['waiting for repair or spare']:.3f}", f"{lost['checkpoint writes']:.3f}",
                f"{lost['straggler slowdown']:.3f}", f"{pt.young_min:.3f}",
                f"{pt.daly_min:.3f}", "true",
            ])


def write_png(sweep: SweepResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [float(v) for v in sweep.values]
    ys = [pt.ettr.mean for pt in sweep.points]
    half = [cast(float, pt.ettr.ci95) for pt in sweep.points]  # the simulator's: half-widths
    err = [0.0 if math.isnan(h) else h for h in half]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label="simulated ETTR (95% CI)")
    best = sweep.optimum
    ax.plot([best.value], [best.ettr.mean], "r*", markersize=12,
            label=f"optimum found: {best.value:g}")
    daly, young = sweep.daly_min, sweep.young_min
    if sweep.param == "ckpt-interval" and not math.isnan(daly):
        ax.axvline(daly, color="g", linestyle="--", label=f"Daly {daly:.1f} min")
        ax.axvline(young, color="g", linestyle=":", label=f"Young {young:.1f} min")
        ax.set_xlabel("checkpoint interval (min)")
    else:
        ax.set_xlabel(sweep.param)
        if not math.isnan(daly):
            ax.plot([], [], " ", label=f"Young/Daly interval here: {daly:.1f} min")
    ax.set_ylabel("ETTR")
    ax.set_title(f"ETTR vs {sweep.param} — {SIMULATED.split(' (')[0]}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, SIMULATED, fontsize=6, color="gray")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
