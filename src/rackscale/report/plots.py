"""PNG plots for the HTML report (matplotlib, Agg canvas, no display), returned as base64.

Figures are drawn with `matplotlib.figure.Figure` directly rather than pyplot: no global
figure registry to leak between reports, and a faster import.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

# The basis colours and the loss colour are the palette's (shared with the dashboard); the
# loss is also hatched.
from rackscale.report.palette import BASIS_COLORS, LOSS_COLOR

STEP_COLORS = ["#000000", "#0072b2", "#56b4e9", "#cc79a7", "#009e73", "#e69f00", "#d55e00"]


def _png(fig: Figure) -> str:
    # Margins are set by hand (subplots_adjust) rather than bbox_inches="tight", which draws
    # the figure twice: the report must build in well under 3 s on a loaded 2-core machine.
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def waterfall(ledger: list[dict[str, Any]]) -> str:
    """Bars for each step's count, with the loss between steps stacked above in red."""
    fig = Figure(figsize=(11.5, 4.2))
    fig.subplots_adjust(left=0.06, right=0.99, top=0.9, bottom=0.2)
    ax = fig.add_subplot()
    labels = [s["label"].split(" (")[0] for s in ledger]
    counts = [float(s["count"]) for s in ledger]
    top = max(counts) if counts else 1.0
    for i, s in enumerate(ledger):
        ax.bar(i, counts[i], color=BASIS_COLORS.get(s["basis"], "#868e96"), width=0.62)
        if i:
            loss = counts[i - 1] - counts[i]
            if loss > 0:
                ax.bar(i, loss, bottom=counts[i], color=LOSS_COLOR, width=0.62, alpha=0.55,
                       hatch="//", edgecolor="#7a3500", lw=0)
        label_y = counts[i]
        if s.get("ci95"):
            lo, hi = s["ci95"]
            ax.errorbar(i, counts[i], yerr=[[counts[i] - lo], [hi - counts[i]]], color="k",
                        capsize=4, lw=1)
            label_y = max(label_y, hi)
        text = f"{counts[i]:,.1f}" if counts[i] % 1 else f"{int(counts[i]):,}"
        ax.text(i, label_y + top * 0.015, text, ha="center", va="bottom", fontsize=10,
                fontweight="bold")
    ax.set_xticks(range(len(labels)), labels, rotation=12, ha="right", fontsize=9)
    ax.set_ylabel("GPUs")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylim(0, top * 1.1)
    ax.spines[["top", "right"]].set_visible(False)
    used = list(dict.fromkeys(s["basis"] for s in ledger))
    handles = [Patch(color=BASIS_COLORS.get(b, "#868e96"), label=b.replace("_", " "))
               for b in used]
    handles.append(Patch(facecolor=LOSS_COLOR, alpha=0.55, hatch="//", edgecolor="#7a3500",
                         label="lost at this step"))
    ax.legend(handles=handles, fontsize=8, ncol=len(handles), loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    return _png(fig)


def _sweep_points(sweep: Any) -> list[tuple[str, float, float | None, float | None]]:
    """(label, ETTR mean, CI low, CI high) per point of a simulate.run sweep: the simulate
    room's `sweep()` dict ({param, points: [{value, ettr: {mean, ci95}}]}) or a plain list."""
    param = sweep.get("param") if isinstance(sweep, dict) else None
    rows = sweep.get("points", []) if isinstance(sweep, dict) else sweep
    out: list[tuple[str, float, float | None, float | None]] = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        if param is not None and "value" in row:
            label = f"{param}={row['value']}"
        else:
            label = next((f"{k}={row[k]}" for k in ("policy", "name", "value",
                                                    "ckpt_interval_min") if k in row), "?")
        ettr = row.get("ettr")
        mean = ettr.get("mean") if isinstance(ettr, dict) else ettr
        ci = ettr.get("ci95") if isinstance(ettr, dict) else None
        if not isinstance(mean, int | float):
            continue
        if isinstance(ci, int | float):
            out.append((label, float(mean), mean - ci, mean + ci))
        elif isinstance(ci, list | tuple) and len(ci) == 2:
            out.append((label, float(mean), float(ci[0]), float(ci[1])))
        else:
            out.append((label, float(mean), None, None))
    return out


def ettr_sweep(sim: dict[str, Any]) -> str | None:
    """ETTR with its 95% CI per policy of the sweep, or None when the run had no sweep."""
    points = _sweep_points(sim.get("sweep"))
    if not points:
        return None
    fig = Figure(figsize=(7, 3.4))
    fig.subplots_adjust(left=0.1, right=0.98, top=0.95, bottom=0.28)
    ax = fig.add_subplot()
    xs = range(len(points))
    means = [p[1] for p in points]
    err = [[p[1] - (p[2] if p[2] is not None else p[1]) for p in points],
           [(p[3] if p[3] is not None else p[1]) - p[1] for p in points]]
    ax.errorbar(xs, means, yerr=err, fmt="o-", color=BASIS_COLORS["simulated"], capsize=4)
    ax.set_xticks(list(xs), [p[0] for p in points], rotation=18, ha="right", fontsize=8)
    ax.set_ylabel("ETTR (simulated)")
    lows = [p[2] if p[2] is not None else p[1] for p in points]
    ax.set_ylim(max(0.0, min(0.5, min(lows) - 0.05)), 1.0)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def lost_hours(causes: dict[str, float]) -> str | None:
    """Lost hours per trial by cause (simulated), largest first."""
    items = sorted(((k, v) for k, v in causes.items() if v > 0), key=lambda kv: -kv[1])[:12]
    if not items:
        return None
    height = 0.35 * len(items) + 1
    fig = Figure(figsize=(7, height))
    fig.subplots_adjust(left=0.3, right=0.98, top=1 - 0.1 / height, bottom=0.55 / height)
    ax = fig.add_subplot()
    ax.barh([k for k, _ in items][::-1], [v for _, v in items][::-1],
            color=BASIS_COLORS["simulated"])
    ax.set_xlabel("hours lost (simulated)")
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


def history(entries: list[dict[str, Any]]) -> str | None:
    """Usable GPUs per ledger step over the last reports (oldest left), one line per step."""
    points = [e for e in entries if isinstance(e.get("ledger"), dict)]
    if len(points) < 2:
        return None
    keys = list(dict.fromkeys(k for e in points for k in e["ledger"]))
    fig = Figure(figsize=(11.5, 3.0))
    fig.subplots_adjust(left=0.07, right=0.8, top=0.95, bottom=0.2)
    ax = fig.add_subplot()
    xs = list(range(len(points)))
    markers = "osD^v<>p"
    for i, key in enumerate(keys):
        ys = [e["ledger"].get(key) for e in points]
        ax.plot(xs, ys, marker=markers[i % len(markers)], color=STEP_COLORS[i % len(STEP_COLORS)],
                label=key, lw=1.5)
    labels = [str(e.get("generated_at") or "?")[5:16].replace("T", " ") for e in points]
    ax.set_xticks(xs, labels, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("GPUs")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    return _png(fig)
