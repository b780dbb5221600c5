"""Typer options generated from a pydantic config's fields, so a default lives in one place.

    @app.command("run")
    @config_options(SimConfig, SIM_OPTIONS)
    def run_cmd(fleet: str | None = FleetOption, config: dict[str, Any] = CONFIG, ...) -> None:
        cfg = make_config(**config)

The command declares a parameter `config` where the options belong; the decorator puts one
option per field of `options` there, with the field's default and plain type (the config
validates the value, so a bad one is the config's error, naming the option), and passes their
values to the command as the one dict `config`, keyed by field name.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import typer
from pydantic import BaseModel

F = TypeVar("F", bound=Callable[..., Any])
CONFIG_PARAM = "config"
# The placeholder default of a command's `config` parameter (replaced by the decorator).
CONFIG: Any = None


@dataclass(frozen=True, slots=True)
class ConfigOption:
    """How one config field shows on the command line: its flag, help, and any further
    Typer settings (e.g. `min=0`, checked before the config sees the value)."""

    flag: str
    help: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def cli_type(annotation: Any) -> Any:
    """The plain type Typer can parse for a field's annotation: `Annotated[float, ...]` is
    float, `Literal["a", "b"]` is str, `X | None` stays optional."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return cli_type(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return type(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = cli_type(args[0]) if len(args) == 1 else str
        return inner | None if len(args) < len(typing.get_args(annotation)) else inner
    return annotation


def config_options(model: type[BaseModel],
                   options: Mapping[str, ConfigOption]) -> Callable[[F], F]:
    """Decorator: replace the command's `config` parameter by one option per field."""
    fields = model.model_fields
    unknown = set(options) - set(fields)
    if unknown:
        raise ValueError(f"{model.__name__} has no fields {sorted(unknown)}")

    def params() -> list[inspect.Parameter]:
        out = []
        for name, opt in options.items():
            info = fields[name]
            default = None if info.is_required() else info.default
            out.append(inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=cli_type(info.annotation),
                default=typer.Option(default, opt.flag, help=opt.help, **opt.extra)))
        return out

    def deco(fn: F) -> F:
        sig = inspect.signature(fn)
        if CONFIG_PARAM not in sig.parameters:
            raise TypeError(f"{fn.__name__} has no `{CONFIG_PARAM}` parameter to replace")
        clash = set(options) & set(sig.parameters)
        if clash:
            raise TypeError(f"{fn.__name__} already takes {sorted(clash)}")
        new: list[inspect.Parameter] = []
        for p in sig.parameters.values():
            if p.name == CONFIG_PARAM:
                new += params()
            else:
                new.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            config = {name: kwargs.pop(name) for name in options}
            return fn(**kwargs, **{CONFIG_PARAM: config})

        command.__signature__ = sig.replace(parameters=new)  # type: ignore[attr-defined]  # inspect reads it; typeshed lacks it
        return command  # type: ignore[return-value]  # fn wrapped, its signature set above
    return deco
