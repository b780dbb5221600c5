"""The ladder's stages: one table of numbers and names, one parser for every option that
names stages (`certify run --stages`, `report build|show --stage`), so both accept the same
words and an unknown one lists the valid ones instead of silently matching nothing."""

from __future__ import annotations

from collections.abc import Iterable

from rackscale.errors import UserError

STAGE_NAMES = {1: "gpu", 2: "tray", 3: "domain", 4: "multi-rack"}
_BY_NAME = {name: n for n, name in STAGE_NAMES.items()}


class UnknownStage(UserError):
    pass


def valid_stages() -> str:
    return ", ".join(f"{n} ({name})" for n, name in STAGE_NAMES.items())


def parse_stages(items: Iterable[str], option: str = "--stages") -> tuple[int, ...]:
    """Stage numbers from numbers or names, comma-separated or repeated: `1,2`, `gpu,domain`,
    `multi-rack`. Raises UnknownStage naming the valid stages."""
    out: list[int] = []
    for item in items:
        for word in str(item).replace(" ", "").split(","):
            if not word:
                continue
            n = int(word) if word.isdigit() else _BY_NAME.get(word.lower())
            if n not in STAGE_NAMES:
                raise UnknownStage(f"{option} {word!r} is not a ladder stage; valid stages: "
                                   f"{valid_stages()} (a number or a name)")
            out.append(n)
    if not out:
        raise UnknownStage(f"{option}: name at least one stage; valid stages: {valid_stages()}")
    return tuple(sorted(set(out)))
