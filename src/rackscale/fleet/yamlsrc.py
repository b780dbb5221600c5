"""YAML loading that remembers where each value came from, for error messages.

`load_yaml(text, filename)` returns plain Python data plus a map from a key path
(`("regions", 0, "racks", 1, "count")`) to its 1-based line number, so a validation error
can say `fleet.yaml:7: regions[0].racks[1].count: ...`. Other rooms (faults files) use it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from rackscale.errors import UserError

Path = tuple[str | int, ...]


class SpecError(UserError):
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


def _build(node: yaml.Node, path: Path, lines: dict[Path, int]) -> Any:
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.safe_load(yaml.serialize(key_node))
            if key in out:
                raise SpecError(
                    f"line {key_node.start_mark.line + 1}: key {key!r} appears twice in the "
                    f"same mapping; keep one"
                )
            out[key] = _build(value_node, (*path, key), lines)
            lines[(*path, key)] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines) for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def load_yaml(text: str, filename: str) -> YamlSource:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = err.problem or err.context or "syntax error"
        opened = ""
        if err.context and err.context_mark is not None and err.context_mark is not mark:
            # e.g. an unclosed bracket: the problem shows at the end, the cause where it opened
            opened = f" ({err.context} at line {err.context_mark.line + 1})"
        raise SpecError(
            f"{filename}{line}: YAML syntax error: {problem}{opened}. Fix the YAML there "
            f"(check indentation, colons and brackets)."
        ) from None
    if root is None:
        raise SpecError(f"{filename}:1: the file is empty; write a mapping with the spec's keys")
    lines: dict[Path, int] = {}
    try:
        data = _build(root, (), lines)
    except SpecError as err:
        raise SpecError(f"{filename}:{str(err).removeprefix('line ')}") from None
    return YamlSource(filename=filename, data=data, lines=lines)


def read_yaml(path: str) -> YamlSource:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file; give the path of a YAML spec") from None
    except OSError as err:
        raise SpecError(f"{path}: cannot read it ({err.strerror})") from None
    return load_yaml(text, path)


def _hint(err: dict[str, Any]) -> str:
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


def validate(model: Any, source: YamlSource) -> Any:
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
