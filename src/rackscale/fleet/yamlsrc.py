"""YAML loading that remembers where each value came from, for error messages.

`load_yaml(text, filename)` returns plain Python data plus a map from a key path
(`("regions", 0, "racks", 1, "count")`) to its 1-based line number, so a validation error
can say `fleet.yaml:7: regions[0].racks[1].count: ...`. Other rooms (faults files) use it too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from rackscale.inputs import InputError, build_yaml, compose_yaml, read_text

if TYPE_CHECKING:
    from pydantic import BaseModel

Path = tuple[str | int, ...]
_Model = TypeVar("_Model", bound="BaseModel")


class SpecError(InputError):
    """A spec file that does not parse or validate. The message names file, line, field, fix."""


@dataclass(slots=True)
class YamlSource:
    filename: str
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """Line of the deepest known prefix of `path` (pydantic locs may run past the YAML)."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def where(self, path: Sequence[str | int]) -> str:
        line = self.line_of(path)
        return f"{self.filename}:{line}" if line is not None else self.filename


def dotted(path: Sequence[str | int]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def load_yaml(text: str, filename: str) -> YamlSource:
    root = compose_yaml(text, filename, error=SpecError)
    if root is None:
        raise SpecError(f"{filename}:1: the file is empty; write a mapping with the spec's keys")
    lines: dict[Path, int] = {}
    data = build_yaml(root, filename, lines=lines, error=SpecError)
    return YamlSource(filename=filename, data=data, lines=lines)


def read_yaml(path: str, what: str = "YAML spec") -> YamlSource:
    return load_yaml(read_text(path, what, error=SpecError), path)


def _hint(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        return "remove this key or fix its spelling"
    if kind in ("greater_than", "greater_than_equal"):
        bound = ctx.get("gt", ctx.get("ge"))
        return f"use a value above {bound}" if "gt" in ctx else f"use a value of {bound} or more"
    if kind in ("less_than_equal", "less_than"):
        return f"use a value within {ctx.get('le', ctx.get('lt'))}"
    if kind == "missing":
        return "add this key"
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return "give a value of the right type"
    return ""


def validate(model: type[_Model], source: YamlSource) -> _Model:
    """Validate `source.data` into pydantic `model`; raise SpecError naming line, field, fix."""
    from pydantic import ValidationError

    try:
        return model.model_validate(source.data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            hint = _hint(err)
            fix = f" Fix: {hint}." if hint else ""
            problems.append(f"{source.where(loc)}: {dotted(loc)}: {msg}.{fix}")
        raise SpecError("\n".join(problems)) from None
