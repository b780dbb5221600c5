"""Every option and argument of every command is in docs/cli.md's tables, with the same kind of
value everywhere, and each table row lists exactly the commands that have it: one name per
concept across the CLI."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest
import typer

from rackscale.cli import app

DOC = Path(__file__).parents[2] / "docs" / "cli.md"
KIND = {"str": "TEXT", "int": "INT", "float": "FLOAT", "path": "FILE"}


def _table(heading: str) -> dict[str, list[str]]:
    """Rows of the markdown table under `## heading`: first cell (backticks stripped) -> cells."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        if not line.startswith("|") or set(line) <= set("|- "):
            continue
        # a `\|` inside a cell is a literal bar (markdown's escape): `URL|FILE`, `tree|block`
        cells = [c.strip().replace("\\|", "|")
                 for c in re.split(r"(?<!\\)\|", line.strip().removeprefix("|").removesuffix("|"))]
        key = cells[0].strip("`")
        if key in ("option", "argument"):
            continue
        assert key not in rows, f"{key} appears twice in docs/cli.md: one row per concept"
        rows[key] = cells
    return rows


def _commands() -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []

    def walk(cmd: object, path: list[str]) -> None:
        out.append((" ".join(path) or "rackscale", cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def _kind(param: object) -> str:
    if getattr(param, "is_flag", False):
        return "FLAG"
    meta = getattr(param, "metavar", None)
    return meta or KIND.get(param.bare_type(), param.bare_type().upper())


def _used() -> tuple[dict[str, dict[str, str]], dict[str, set[str]]]:
    """option -> {command: value kind}; argument metavar -> {commands}."""
    options: dict[str, dict[str, str]] = defaultdict(dict)
    arguments: dict[str, set[str]] = defaultdict(set)
    for name, cmd in _commands():
        for p in cmd.params:
            if p.param_type_name == "option":
                assert not p.secondary_opts or p.is_flag, f"{name}: {p.opts} has aliases"
                assert len(p.opts) == 1, f"{name}: {p.opts}: one spelling per option"
                options[p.opts[0]][name] = _kind(p)
            else:
                assert p.metavar, f"{name}: argument {p.name} needs a metavar from docs/cli.md"
                arguments[p.metavar].add(name)
    return options, arguments


def test_the_walk_sees_the_whole_tree() -> None:
    names = {n for n, _ in _commands()}
    assert {"demo", "fleet show", "certify run", "simulate sweep", "report build"} <= names
    options, _ = _used()
    assert len(options) > 40 and "--fleet" in options and "--seed" in options


def test_every_option_is_in_the_table_with_its_value_and_commands() -> None:
    table = _table("Options")
    options, _ = _used()
    for opt, per_command in sorted(options.items()):
        assert opt in table, f"{opt} ({', '.join(per_command)}) is missing from docs/cli.md"
        _, value, _, commands = table[opt]
        listed = {c.strip() for c in commands.split(",")}
        kinds = {k for k in per_command.values()}
        assert kinds == {value}, f"{opt}: takes {kinds} in {per_command}; docs/cli.md: {value}"
        assert listed == set(per_command), (
            f"{opt}: used by {sorted(per_command)}, docs/cli.md lists {sorted(listed)}")
    stale = set(table) - set(options)
    assert not stale, f"docs/cli.md lists options no command has: {sorted(stale)}"


def test_every_argument_is_in_the_table() -> None:
    table = _table("Arguments")
    _, arguments = _used()
    for meta, commands in sorted(arguments.items()):
        assert meta in table, f"argument {meta} ({sorted(commands)}) missing from docs/cli.md"
        listed = {c.strip() for c in table[meta][2].split(",")}
        assert listed == commands, f"{meta}: used by {sorted(commands)}, listed {listed}"
    assert not set(table) - set(arguments)


@pytest.mark.parametrize("concept,option", [("random seed", "--seed"),
                                            ("fleet spec", "--fleet")])
def test_one_spelling_per_concept(concept: str, option: str) -> None:
    """No other option's help describes the concept an option in the table owns."""
    words = {"random seed": re.compile(r"\brandom seed\b", re.I),
             "fleet spec": re.compile(r"\bfleet spec\b|\bbuilt-in fleet\b", re.I)}[concept]
    for name, cmd in _commands():
        for p in cmd.params:
            if p.param_type_name == "option" and words.search(p.help or ""):
                assert p.opts == [option], f"{name} {p.opts}: a {concept} is {option}"
            if p.param_type_name == "argument":
                assert not words.search(getattr(p, "help", "") or ""), (
                    f"{name}: the {concept} is an option ({option}), not an argument")
