"""Lazy package exports (PEP 562): a package names what it exports and the module each lives
in, and a name's module is imported on first use. Rooms use it so a light entry point (a rank
agent on a bare GPU machine, the store without torch) does not import the heavy modules behind
the others. Like `rackscale.errors` it imports nothing of rackscale."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `exports` maps a name to its submodule (relative
    to the package); the first lookup imports it and keeps the value in `namespace` (the
    package's `globals()`), so later lookups are plain attribute reads."""
    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        namespace[name] = value
        return value
    return __getattr__
