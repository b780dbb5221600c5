"""Numbers as a reader reads them: fixed-point, never scientific notation.

A value with its uncertainty is written with the uncertainty to two significant figures and
the value to the same decimal place (0.93 ± 0.02, 0.000088 ± 0.0000051 is 0.0000880 ±
0.0000051), so the digits shown are the digits that mean something.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DECIMALS = 8  # below 1e-8 a figure is shown as 0 (with its sign)


def _decimals_for(v: float, significant: int) -> int:
    if v == 0 or not math.isfinite(v):
        return 0
    return max(0, min(MAX_DECIMALS, significant - 1 - math.floor(math.log10(abs(v)))))


def fixed(v: float, decimals: int) -> str:
    text = f"{v:,.{decimals}f}"
    return "0" if text.lstrip("-").strip("0.,") == "" else text


def number(v: Any, significant: int = 4) -> str:
    """A figure for a table cell: integers as they are, floats to `significant` figures
    without exponent (big ones with thousands separators and no decimals)."""
    if v is None:
        return "—"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if not math.isfinite(v):
        return "∞" if v > 0 else ("-∞" if v < 0 else "—")
    if abs(v) >= 10 ** significant:
        return f"{v:,.0f}"
    text = fixed(v, _decimals_for(v, significant))
    # trailing zeros after the point carry no meaning for a bare figure
    return text.rstrip("0").rstrip(".") if "." in text else text


def plus_minus(v: Any, err: Any) -> str:
    """`v ± err` with both to the decimal place of err's second significant figure."""
    if not isinstance(v, int | float) or not isinstance(err, int | float) \
            or not math.isfinite(float(err)) or not math.isfinite(float(v)):
        return number(v)
    err = abs(float(err))
    decimals = _decimals_for(err, 2) if err else _decimals_for(float(v), 4)
    return f"{fixed(float(v), decimals)} ± {fixed(err, decimals)}"


def interval(lo: Any, hi: Any) -> str:
    """[lo, hi] with both to the decimal place that tells them apart (at least 4 figures)."""
    if not all(isinstance(x, int | float) and math.isfinite(float(x)) for x in (lo, hi)):
        return f"[{number(lo)}, {number(hi)}]"
    width = abs(float(hi) - float(lo))
    decimals = max(_decimals_for(width, 2) if width else 0,
                   _decimals_for(max(abs(float(lo)), abs(float(hi))), 4))
    return f"[{fixed(float(lo), decimals)}, {fixed(float(hi), decimals)}]"


def count(n: float) -> str:
    """A GPU count: integers plain, fractional ones (expected goodput) to one decimal."""
    return f"{n:,.1f}" if float(n) % 1 else f"{int(n):,}"
