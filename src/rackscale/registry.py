"""One registry type for everything chosen by name: rack templates, probes, fault kinds, failure
models (and runners). It imports nothing of rackscale but `rackscale.errors`, so every room can
use it, and a probe still imports on a bare GPU machine without the fleet's pydantic.

A registry is a read-only mapping from name to item, filled with `register(name)` (a decorator)
or `add(name, item)`. Looking up a name that is not there raises the registry's own error
(a `UserError`, so the CLI prints it and exits 2) whose message lists every valid name. Tests
that register an example undo it with `with REGISTRY.scoped(): ...`, or work on a `copy()`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from rackscale.errors import UserError

T = TypeVar("T")
Item = TypeVar("Item")


class UnknownName(UserError, LookupError):
    """A name no registry entry has; the message lists the valid ones."""


class Registry(Mapping[str, T]):
    """Items of one sort by name, in registration order (or sorted, for messages that read
    better so).

    `what` names one item in messages ("rack template"), `plural` the heading of the valid list
    ("templates"); `error` is the exception type an unknown name raises.
    """

    def __init__(self, what: str, *, plural: str | None = None,
                 error: type[UnknownName] = UnknownName, sort_names: bool = False) -> None:
        self.what = what
        self.plural = plural or f"{what}s"
        self.error = error
        self.sort_names = sort_names
        self._items: dict[str, T] = {}

    # ------------------------------------------------------------------ filling
    def add(self, name: str, item: T, *, replace: bool = False) -> T:
        if not replace and name in self._items:
            raise ValueError(f"{self.what} {name!r} is registered twice")
        self._items[name] = item
        return item

    def register(self, name: str, *, replace: bool = False) -> Callable[[Item], Item]:
        """Decorator: register the decorated object (a class, a factory) under `name`."""
        def deco(item: Item) -> Item:
            self.add(name, item, replace=replace)  # type: ignore[arg-type]  # a registered item is a T
            return item
        return deco

    def unregister(self, name: str) -> None:
        del self._items[self.check(name)]

    @contextmanager
    def scoped(self) -> Iterator[Registry[T]]:
        """Whatever is registered inside the block is gone after it (tests, examples)."""
        saved = dict(self._items)
        try:
            yield self
        finally:
            self._items = saved

    def copy(self) -> Registry[T]:
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out._items = dict(self._items)
        return out

    # ------------------------------------------------------------------ lookups
    def names(self) -> list[str]:
        return sorted(self._items) if self.sort_names else list(self._items)

    def unknown_message(self, name: object) -> str:
        return f"unknown {self.what} {name!r}; valid {self.plural}: {', '.join(self.names())}"

    def check(self, name: str) -> str:
        """`name` if it is registered; else the registry's error listing the valid names."""
        if name not in self._items:
            raise self.error(self.unknown_message(name))
        return name

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise self.error(self.unknown_message(name)) from None

    def get(self, name: str, default: T | None = None) -> T | None:  # type: ignore[override]  # Mapping.get's overloads in one
        return self._items.get(name, default)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # A registry is one shared object, not a value: equal only to itself, and hashable, so a
    # dataclass may take the default registry as a field default.
    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self.names())})"
