"""The house as a test: the import contract of pyproject.toml (`lint-imports`) holds on src/, and
breaks on a deliberately wrong import, so it cannot pass by checking nothing."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import pkgutil
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import rackscale

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "rackscale"
LINT = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
ROOMS = sorted(m.name for m in pkgutil.iter_modules(rackscale.__path__) if m.ispkg)


def _lint(project: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    return subprocess.run(
        [LINT, "--no-cache", "--no-logo", str(project / "pyproject.toml")], cwd=project, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )


def _copy_project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(SRC, tmp_path / "src" / "rackscale",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_import_contract_holds() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "bad_import", "contract"), [
    # fleet is the bottom of the house: it may import nothing of rackscale
    ("fleet/spec.py", "from rackscale.store import Store", "rooms depend one way"),
    # certify and lifecycle are independent rooms
    ("certify/ladder.py", "from rackscale.lifecycle import Controller", "rooms depend one way"),
    # the simulator sees fleet and faults only, though it sits above the store in the table
    ("simulate/engine.py", "from rackscale.store import Store", "see only fleet and faults"),
    # the lab too, its __init__ included (the contract's source module is the whole room)
    ("lab/__init__.py", "from rackscale.store import Store", "see only fleet and faults"),
    # a room's public API is its __init__
    ("cli/fleet.py", "from rackscale.fleet.topology import Topology", "through its __init__"),
])
def test_import_contract_breaks_on_a_wrong_import(
    tmp_path: Path, module: str, bad_import: str, contract: str,
) -> None:
    project = _copy_project(tmp_path)
    target = project / "src" / "rackscale" / module
    target.write_text(target.read_text() + f"\n{bad_import}  # noqa\n")
    done = _lint(project)
    assert done.returncode != 0
    broken = done.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken, done.stdout


@pytest.mark.parametrize("room", ROOMS)
def test_no_room_exports_a_name_that_shadows_its_own_module(room: str) -> None:
    """`from rackscale.report import collect` once meant a function and a module at once: the
    import checker read the module, the interpreter the function."""
    package = importlib.import_module(f"rackscale.{room}")
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    exported = set(getattr(package, "__all__", ()))
    assert not exported & modules, f"rackscale.{room} exports {sorted(exported & modules)}"


def test_no_private_name_is_imported_from_another_module() -> None:
    """A leading underscore means "only this module": another module that needs the name needs
    it public (or its own copy)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rackscale"):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offenders.append(f"{path.relative_to(SRC)}: {node.module}.{alias.name}")
    assert not offenders, offenders


def test_no_two_rooms_export_one_name_for_two_things() -> None:
    """A name two rooms export must be the same object re-exported (lifecycle passes on
    fleet's CduReading), never two meanings (a rack machine vs a rack kind; coolant tiers vs
    checkpoint tiers; a GPU route vs pathlib.Path)."""
    owners: dict[str, tuple[str, object]] = {}
    clashes = []
    for room in ROOMS:
        package = importlib.import_module(f"rackscale.{room}")
        for name in getattr(package, "__all__", ()):
            value = getattr(package, name)
            if name in owners:
                first_room, first = owners[name]
                if first is not value or isinstance(value, str | int | float):
                    clashes.append(f"{name}: {first_room} and {room}")
            else:
                owners[name] = (room, value)
    assert not clashes, clashes
    assert "Path" not in owners and "Tier" not in owners  # pathlib.Path, checkpoint tiers


@pytest.mark.parametrize(("owner", "tables"), [
    ("store", ("EventRow", "ComponentRow", "FleetRow", "sqlalchemy")),
    ("lifecycle", ("LifecycleRow", "lifecycle_state")),
])
def test_rooms_read_another_rooms_tables_through_its_api(owner: str,
                                                         tables: tuple[str, ...]) -> None:
    """SQL on the store's tables belongs to the store (and lifecycle's own table to lifecycle;
    lifecycle also uses SQLAlchemy for it): other rooms call `Store` and lifecycle functions."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        room = path.relative_to(SRC).parts[0]
        if room == owner:
            continue
        # lifecycle keeps its own table with SQLAlchemy, but reads and writes the event log
        # through `Store` like every other room
        mine = {"sqlalchemy"} if room == "lifecycle" and owner == "store" else set()
        text = path.read_text()
        offenders += [f"{path.relative_to(SRC)}: {t}" for t in tables
                      if t in text and t not in mine]
    assert not offenders, offenders


# Functions over the limits for a stated reason. A Typer command takes one parameter per CLI
# option (they are its interface), so commands are held to the line limit only.
OVER_THE_LIMITS = {
    "rackscale/store/db.py::Store.events": "the optional, keyword-only filters of one query",
    "rackscale/store/db.py::Store.append_event":
        "an event's fields, keyword-only after the payload",
    "rackscale/lifecycle/repository.py::transition":
        "keyword-only options of one transaction (actor, reason, session, expect, extra)",
    "rackscale/lifecycle/controller.py::Controller.__init__":
        "the controller's drivers and clock, keyword-only",
    "rackscale/certify/ladder.py::Ladder.__init__": "keyword-only collaborators of a run",
    "rackscale/certify/findings.py::store_run":
        "the parts of one stored run, keyword-only (run, findings, results, plant)",
    "rackscale/certify/runners/slurm.py::SlurmRunner.__init__":
        "keyword-only settings of the Slurm runner",
    "rackscale/certify/runners/local.py::LocalRunner.__init__":
        "keyword-only settings of the local runner",
    "rackscale/checkpoint/s3store.py::S3Store.__init__": "keyword-only S3 connection settings",
    "rackscale/certify/verdict.py::judge": "a figure, its expectation and keyword-only margins",
    "rackscale/certify/state.py::RunState.finding": "the fields of one finding",
    "rackscale/certify/state.py::RunState.finding_from": "the fields of one finding",
    "rackscale/checkpoint/manifest.py::Manifest.new": "the fields of one manifest",
    "rackscale/checkpoint/multinode.py::build_manifest": "the fields of one manifest",
    "rackscale/fleet/templates.py::_nvl72": "the figures of one rack template",
    "rackscale/report/ledger.py::_LedgerBuild.record": "the fields of one ledger step",
    "rackscale/certify/k8s.py::_job": "one Job manifest: its batch, wave, members and options",
    "rackscale/cli/certify_plan.py::run_plan":
        "the `certify plan` command's options, passed on keyword-only",
    "rackscale/cli/lifecycle.py::controller":
        "maps the lifecycle commands' driver options (plant, Redfish, Slurm, twin) to drivers",
    "rackscale/cli/serve.py::serve": "the `serve` command's options (registered, not decorated)",
    "rackscale/soak/schedule.py::draw":
        "the keyword-only settings of one schedule (its size, timings, seed, kinds)",
    "rackscale/soak/measure.py::figures":
        "the keyword-only parts of one soak's record (job, sizes, window, faults, seed)",
    "rackscale/server/ops.py::list_incidents":
        "a FastAPI endpoint: its query filters and paging are its parameters",
}


def _hotspots() -> object:
    spec = importlib.util.spec_from_file_location("hotspots", ROOT / "scripts" / "hotspots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hotspots"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def _is_command(path: str, name: str) -> bool:
    tree = ast.parse((SRC.parent / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return any(isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                       and d.func.attr in ("command", "callback") for d in node.decorator_list)
    return False


def test_functions_stay_short_and_take_few_parameters() -> None:
    """No function in src/ over 80 lines or 6 parameters without a reason stated above
    (`python scripts/hotspots.py` lists them)."""
    hs: Any = _hotspots()
    offenders = []
    for f in hs.functions(SRC.parent):
        if f.key in OVER_THE_LIMITS:
            continue
        params_ok = f.params <= hs.MAX_PARAMS or (
            f.path.startswith("rackscale/cli/") and _is_command(f.path, f.name))
        if f.lines > hs.MAX_LINES or not params_ok:
            offenders.append(f"{f.key}: {f.lines} lines, {f.params} parameters")
    assert not offenders, offenders
    stale = set(OVER_THE_LIMITS) - {f.key for f in hs.functions(SRC.parent) if f.over()}
    assert not stale, f"no longer over the limits, drop from OVER_THE_LIMITS: {sorted(stale)}"


def test_the_measure_sees_a_long_function_and_a_long_parameter_list(tmp_path: Path) -> None:
    hs: Any = _hotspots()
    body = "\n".join(f"    x{n} = {n}" for n in range(85))
    (tmp_path / "m.py").write_text(
        f"class C:\n    def wide(self, a, b, c, d, e, f, *, g):\n        pass\n"
        f"def long():\n{body}\n")
    found = {f.name: f for f in hs.functions(tmp_path)}
    assert (found["C.wide"].params, found["C.wide"].over()) == (7, True)
    assert (found["long"].lines, found["long"].over()) == (86, True)
    assert not hs.Function("m.py", "ok", 1, 80, 6, ).over()


def test_no_noun_module_imports_the_demo() -> None:
    """The demo imports every noun's step; a noun that imported the demo back (even for a type)
    made an import circle. They share `cli/_pipeline.py` instead."""
    offenders = []
    for path in sorted((SRC / "cli").glob("*.py")):
        if path.name in ("demo.py", "__init__.py"):  # the root registers the demo command
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "rackscale.cli.demo":
                offenders.append(path.name)
    assert not offenders, offenders


# Where an event's raw `payload` (the JSON object as stored) may be read outside the store:
# only to copy an event out whole. Every other reader reads it through its kind's model
# (`Event.read(Model)` / `Event.data`), so a renamed field or a new version is a type error or
# an InvalidPayload, not a `.get` that quietly answers None.
RAW_PAYLOAD_READERS = {
    "report/document.py": "report.json carries the runs' events as stored",
    "report/bundle.py": "the evidence bundle checks the copies it read back are plain JSON",
    "cli/certify.py": "`certify findings --json` prints the run's event as stored",
}


def _raw_payload_reads(path: Path) -> list[int]:
    """Lines of `path` that read an attribute `payload` (not a call `x.payload()`)."""
    tree = ast.parse(path.read_text())
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return [n.lineno for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and n.attr == "payload"
            and isinstance(n.ctx, ast.Load) and id(n) not in called]


def test_event_payloads_are_read_through_their_models() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith("store/") or rel in RAW_PAYLOAD_READERS:
            continue
        offenders += [f"{rel}:{line}" for line in _raw_payload_reads(path)]
    assert not offenders, ("read these events through their payload model (ev.read(Model)): "
                           f"{offenders}")


def test_the_payload_rule_sees_a_dict_read_and_not_a_method_call(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f(ev, r):\n    r.payload()\n    return ev.payload.get('to')\n")
    assert _raw_payload_reads(src) == [3]


# report.html's markup comes from Jinja2 templates (report/templates, autoescape on): a page
# module that escaped by hand again would be one more place to forget a value. Modules of
# report/ that may call an `escape`, and why:
ESCAPE_CALLERS = {
    "report/templates.py": "the template environment's one escaper (html.escape's entities)",
    "report/redact.py": "re.escape: region names as literal text in a regular expression",
}


def _escape_uses(path: Path) -> list[int]:
    """Lines of `path` that import or call an `escape` (html.escape, markupsafe.escape,
    Markup.escape, re.escape, a bare escape). Markup(...) is not one: it is how a section
    rendered by its own template is handed to the page's template."""
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "escape" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Name) and f.id == "escape") or (
                    isinstance(f, ast.Attribute) and f.attr == "escape"):
                lines.append(node.lineno)
    return lines


def test_report_pages_escape_through_their_templates_only() -> None:
    offenders = []
    for path in sorted((SRC / "report").glob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in ESCAPE_CALLERS:
            offenders += [f"{rel}:{line}" for line in _escape_uses(path)]
    assert not offenders, ("report.html's markup belongs in report/templates (autoescape on), "
                           f"not escaped by hand: {offenders}")
    # and no template switches autoescape off for a value
    for tpl in sorted((SRC / "report" / "templates").glob("*.html")):
        text = tpl.read_text()
        assert "|safe" not in text.replace(" ", "") and "autoescape false" not in text, tpl


def test_the_escape_rule_sees_a_hand_written_escape(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("from html import escape\nimport markupsafe\n\n"
                   "def f(x):\n    return escape(x) + markupsafe.escape(x) + x.upper()\n")
    assert _escape_uses(src) == [1, 5, 5]


def _pyproject_layers() -> list[set[str]]:
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layers,) = [c["layers"] for c in conf["tool"]["importlinter"]["contracts"]
                 if c["id"] == "layers"]
    return [{m.strip().removeprefix("rackscale.") for m in line.split("|")} for line in layers]


def test_contracts_md_gives_the_import_contracts_layers() -> None:
    """docs/contracts.md's list of rooms, top to bottom, is pyproject's `layers` contract."""
    text = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    section = text.split("## Imports between rooms\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```\n", 2)[1]
    shown = [{room.strip() for room in line.split("|")} for line in block.splitlines()]
    assert shown == _pyproject_layers()


def test_testing_md_lists_every_test_folder() -> None:
    text = (ROOT / "TESTING.md").read_text(encoding="utf-8")
    listed = text.split("`tests/` has one folder per room of `src/rackscale/` (", 1)[1]
    listed = listed.split(")", 1)[0]
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and any(p.glob("test_*.py"))}
    assert set(re.findall(r"`(\w+)`", listed)) == folders


def test_no_source_file_points_at_pages_users_lack() -> None:
    """DESIGN.md and NUMBERS.md are not shipped: no message, docstring or packaged file of
    src/, nor pyproject.toml, may send a reader there."""
    files = [ROOT / "pyproject.toml", *(p for p in (ROOT / "src").rglob("*")
                                        if p.is_file() and "__pycache__" not in p.parts)]
    named = [f"{p.relative_to(ROOT)}: {word}" for p in files for word in ("DESIGN.md", "NUMBERS.md")
             if word.encode() in p.read_bytes()]
    assert len(files) > 100 and not named, named


_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(?P<rest>.*)$")


def _ignores_without_reason(text: str) -> list[int]:
    """Lines whose `# type: ignore[...]` has no `# why` after it on the line."""
    return [n for n, line in enumerate(text.splitlines(), 1)
            if (m := _IGNORE.search(line)) and not re.match(r"\s*#\s*\S", m["rest"])]


def test_every_type_ignore_in_src_says_why() -> None:
    bare = [f"{p.relative_to(ROOT)}:{n}" for p in sorted(SRC.rglob("*.py"))
            for n in _ignores_without_reason(p.read_text(encoding="utf-8"))]
    assert not bare, f"a `# type: ignore` needs its reason on the line (# why): {bare}"


def test_the_ignore_rule_sees_a_bare_ignore() -> None:
    assert _ignores_without_reason("x = f()  # type: ignore[arg-type]\n"
                                   "y = g()  # type: ignore[misc]  # g's stub is wrong\n"
                                   "z = h()  # type: ignore\n") == [1, 3]
