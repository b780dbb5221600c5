"""What each lost ledger step costs per month at a GPU-hour price.

A GPU the ledger drops is paid for (bought, powered, housed) but does no work, so its cost is
the price of the GPU-hours it does not deliver: lost GPUs x price x hours in a month. The
price is the operator's own (any currency); the figure is derived from the ledger, so it is
measured or simulated exactly as the step it prices.
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any

from rackscale.errors import UserError

HOURS_PER_MONTH = 730.0  # 8760 hours a year / 12
# The most a GPU-hour may cost (any currency): far above any real price, far below where
# lost GPUs x price x hours stops being a finite number.
MAX_PRICE = 1e6


class PriceError(UserError):
    pass


def check_price(price: float | None) -> float | None:
    if price is None:
        return None
    if not math.isfinite(price) or price <= 0 or price > MAX_PRICE:
        raise PriceError(f"--gpu-hour-price must be a positive number up to {MAX_PRICE:,.0f} "
                         f"(price of one GPU-hour, any currency), got {price:g}")
    return float(price)


def cost_section(ledger: list[dict[str, Any]], price: float) -> dict[str, Any]:
    """Per step below the headline: GPUs lost there, and what they cost per month, by reason."""
    rows = []
    for above, step in pairwise(ledger):
        lost = round(float(above["count"]) - float(step["count"]), 1)
        rows.append({"step": step["key"], "lost_gpus": lost, "basis": step["basis"],
                     "per_month": round(lost * price * HOURS_PER_MONTH, 2),
                     "by_reason": {k: round(float(v) * price * HOURS_PER_MONTH, 2)
                                   for k, v in sorted(step["lost"].items())}})
    total = round(sum(r["per_month"] for r in rows), 2)
    return {"gpu_hour_price": price, "hours_per_month": HOURS_PER_MONTH, "steps": rows,
            "total_per_month": total,
            "how": "GPUs lost at each step x price per GPU-hour x 730 hours a month"}
