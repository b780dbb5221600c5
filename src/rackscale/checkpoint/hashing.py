"""Content hashes: blake3 when installed (fast, multi-threaded), sha256 otherwise.

The algorithm name travels in the manifest, so a reader verifies with what the writer used.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

try:
    import blake3 as _blake3
except ImportError:  # pragma: no cover - blake3 is in the s3/test env; sha256 keeps us working
    _blake3 = None

DEFAULT_ALGO = "blake3" if _blake3 is not None else "sha256"


def _new(algo: str) -> Any:
    if algo == "blake3":
        if _blake3 is None:
            raise RuntimeError("manifest uses blake3 but the blake3 package is not installed; "
                               "pip install blake3")
        return _blake3.blake3()
    if algo == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown hash algorithm {algo!r}; valid: blake3, sha256")


HASHERS: dict[str, Callable[[], Any]] = {"blake3": lambda: _new("blake3"),
                                         "sha256": lambda: _new("sha256")}


def digest(data: bytes | memoryview, algo: str = DEFAULT_ALGO) -> str:
    h = _new(algo)
    h.update(data)
    return h.hexdigest()


def chunk_hashes(data: bytes | memoryview, chunk_size: int, algo: str = DEFAULT_ALGO) -> list[str]:
    view = memoryview(data)
    if len(view) == 0:
        return [digest(b"", algo)]
    return [digest(view[o:o + chunk_size], algo) for o in range(0, len(view), chunk_size)]


def combine(parts: Iterable[str], algo: str = DEFAULT_ALGO) -> str:
    """Hash of hashes: the item hash over its chunk hashes, the checkpoint hash over items."""
    h = _new(algo)
    for p in parts:
        h.update(p.encode())
        h.update(b"\n")
    return h.hexdigest()
