"""Stored documents are standard JSON on every backend, and read back as they were written.

Python's `json` writes `Infinity` and `NaN` by default; SQLite keeps that text, PostgreSQL's
JSON type refuses it, so one run recorded on one backend failed on the other. A figure that is
not finite is real, though (a job that no failure interrupted has an infinite MTTF), so it is
neither refused nor dropped: every JSON column goes through `dumps` (the engine's serializer),
which writes it as the tag `{"$nonfinite": "inf"}` (or `"-inf"`, `"nan"`), and `loads` (the
engine's deserializer) turns the tag back into the float. Evidence bundles use the same tag.
"""

from __future__ import annotations

import json
import math
from typing import Any

NONFINITE = "$nonfinite"
_MARK = NONFINITE.encode()


def tag(obj: Any) -> Any:
    """`obj` with every non-finite float as `{"$nonfinite": repr}`: standard JSON."""
    if isinstance(obj, float):  # numpy's float64 is a float; float32 is turned by `default`
        return obj if math.isfinite(obj) else {NONFINITE: repr(obj)}
    if isinstance(obj, dict):
        return {k: tag(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [tag(v) for v in obj]
    return obj


def _untag(d: dict[str, Any]) -> Any:
    if len(d) == 1 and NONFINITE in d:
        return float(d[NONFINITE])
    return d


def _default(obj: Any) -> Any:
    """A numpy scalar (or another number type) as the Python number it is."""
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON")


def dumps(obj: Any, **kw: Any) -> str:
    """Standard JSON of `obj`, a non-finite number tagged. The common document has none, and
    is written in one pass; the walk runs only when `json` refuses one."""
    try:
        return json.dumps(obj, allow_nan=False, default=_default, **kw)
    except ValueError:
        return json.dumps(tag(obj), allow_nan=False, default=_default, **kw)


def loads(data: str | bytes) -> Any:
    """The document `dumps` wrote, non-finite numbers back as floats (the hook runs only on a
    text that holds a tag: reading 100k events pays nothing for it otherwise)."""
    tagged = NONFINITE in data if isinstance(data, str) else _MARK in data
    if tagged:
        return json.loads(data, object_hook=_untag)
    return json.loads(data)
