"""`simulate run` and `simulate sweep` take their options from SimConfig's fields: defaults and
types live in the config alone, and the generator follows whatever model it is given."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
import typer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.cli._options import CONFIG, ConfigOption, config_options
from rackscale.simulate import SimConfig


def _options(*path: str) -> dict[str, Any]:
    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    return {p.name: p for p in cmd.params}


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_every_config_field_is_an_option_with_the_configs_default(command: str) -> None:
    opts = _options("simulate", command)
    for name, info in SimConfig.model_fields.items():
        if name == "job_gpus":  # required by the config; the CLI defaults it to the pool
            assert opts[name].default is None
            continue
        assert name in opts, f"SimConfig.{name} has no option on simulate {command}"
        assert opts[name].default == info.default, name


class Toy(BaseModel):
    size: Annotated[int, Field(ge=1)] = 3
    mode: Literal["fast", "slow"] = "fast"
    limit: float | None = None


def _toy_app(seen: list[dict[str, Any]]) -> typer.Typer:
    toy = typer.Typer()

    @toy.command()
    @config_options(Toy, {"size": ConfigOption("--size", "How many."),
                          "mode": ConfigOption("--mode", "How."),
                          "limit": ConfigOption("--limit", "Up to.", {"min": 0})})
    def go(name: str = typer.Option("x", "--name"), config: dict[str, Any] = CONFIG) -> None:
        seen.append({"name": name} | config)
        Toy(**config)  # the model validates what the options parsed

    return toy


def test_the_generated_options_carry_the_models_defaults_and_types() -> None:
    seen: list[dict[str, Any]] = []
    runner = CliRunner()
    assert runner.invoke(_toy_app(seen), []).exit_code == 0
    assert seen[-1] == {"name": "x", "size": 3, "mode": "fast", "limit": None}
    assert runner.invoke(_toy_app(seen), ["--size", "5", "--limit", "2.5", "--mode",
                                          "slow"]).exit_code == 0
    assert seen[-1] == {"name": "x", "size": 5, "mode": "slow", "limit": 2.5}
    bad = runner.invoke(_toy_app(seen), ["--size", "many"])
    assert bad.exit_code == 2 and len(seen) == 2  # parsed as int before the command runs
    assert runner.invoke(_toy_app(seen), ["--limit", "-1"]).exit_code == 2  # extra: min=0


def test_a_changed_default_in_the_model_is_the_options_default() -> None:
    class Other(Toy):
        size: int = 9

    toy = typer.Typer()

    @toy.command()
    @config_options(Other, {"size": ConfigOption("--size", "How many.")})
    def go(config: dict[str, Any] = CONFIG) -> None:
        print(config["size"])

    assert CliRunner().invoke(toy, []).output.strip() == "9"


def test_a_field_the_model_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="no fields"):
        config_options(Toy, {"colour": ConfigOption("--colour", "?")})
