"""Stored documents are standard JSON on every backend.

Python's `json` writes `Infinity` and `NaN` by default; SQLite keeps that text, PostgreSQL's
JSON type refuses it, so one run recorded on one backend failed on the other. Every JSON
column goes through `dumps` (the engine's serializer), which writes a non-finite number as
`null`; an event's payload is read by `standard` first, so the event says which fields were
not finite (in its reason) instead of losing them silently.
"""

from __future__ import annotations

import json
import math
from typing import Any


def _walk(obj: Any, path: str, nulled: list[str]) -> Any:
    if isinstance(obj, float):  # numpy's float64 is a float; float32 is turned by `default`
        if math.isfinite(obj):
            return obj
        nulled.append(f"{path or '(value)'}={'NaN' if math.isnan(obj) else repr(obj)}")
        return None
    if isinstance(obj, dict):
        return {k: _walk(v, f"{path}.{k}" if path else str(k), nulled) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_walk(v, f"{path}[{i}]", nulled) for i, v in enumerate(obj)]
    return obj


def standard(obj: Any) -> tuple[Any, list[str]]:
    """`obj` with every non-finite float as None, and where each was (`a.b[2]=inf`)."""
    nulled: list[str] = []
    return _walk(obj, "", nulled), nulled


def nulled_reason(reason: str, nulled: list[str]) -> str:
    """An event's reason, saying which fields were stored as null because they were not
    finite (the first few: a reason is one line)."""
    if not nulled:
        return reason
    shown = ", ".join(nulled[:5]) + (f" and {len(nulled) - 5} more" if len(nulled) > 5 else "")
    note = f"not finite, stored as null: {shown}"
    return f"{reason} ({note})" if reason else note


def _default(obj: Any) -> Any:
    """A numpy scalar (or another number type) as the Python number it is."""
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON")


def dumps(obj: Any) -> str:
    """The engine's JSON serializer: standard JSON, a non-finite number written as null."""
    doc, _ = standard(obj)
    return json.dumps(doc, allow_nan=False, default=_default)
