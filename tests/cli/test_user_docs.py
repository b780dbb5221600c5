"""The user docs describe every public format completely and speak to users: every key of the
fleet spec, every fault kind and field, every findings field, every report.json key is in
docs/formats.md; no doc points at files a user does not have."""

from __future__ import annotations

import json
import re
import typing
from importlib import resources
from pathlib import Path

import pytest
from pydantic import BaseModel

from rackscale.certify.findings import Finding
from rackscale.faults.kinds import FAULT_KINDS
from rackscale.faults.spec import Fault, FaultsFile
from rackscale.fleet import FleetSpec
from rackscale.fleet.templates import TEMPLATES

ROOT = Path(__file__).parents[2]
FORMATS = ROOT / "docs" / "formats.md"
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _documented() -> set[str]:
    """Every `code` span of docs/formats.md (keys, kinds and names are written as code)."""
    return set(re.findall(r"`([^`\n]+)`", FORMATS.read_text(encoding="utf-8")))


def _model_keys(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name of a pydantic model and of the models nested in it."""
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    keys = set(model.model_fields)
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            t = stack.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                keys |= _model_keys(t, seen)
            stack.extend(typing.get_args(t))
    return keys


def test_the_model_walk_finds_nested_keys() -> None:
    keys = _model_keys(FleetSpec)
    assert {"name", "regions", "racks", "template", "count", "nodes_per_rack",
            "racks_per_leaf", "spines_per_region", "power_budget_kw"} <= keys


def test_every_fleet_spec_key_and_template_is_documented() -> None:
    missing = sorted(_model_keys(FleetSpec) - _documented())
    assert not missing, f"fleet spec keys missing from docs/formats.md: {missing}"
    missing = sorted(set(TEMPLATES) - _documented())
    assert not missing, f"rack templates missing from docs/formats.md: {missing}"


def test_every_fault_kind_and_field_is_documented() -> None:
    doc = _documented()
    missing = sorted(set(FAULT_KINDS) - doc)
    assert not missing, f"fault kinds missing from docs/formats.md: {missing}"
    missing = sorted((_model_keys(Fault) | _model_keys(FaultsFile)) - doc)
    assert not missing, f"faults file fields missing from docs/formats.md: {missing}"


def test_every_findings_field_is_documented() -> None:
    f = Finding(component="a/r01/c01/gpu0", kind="slow_gpu", stage=1, evidence={},
                confidence=0.9)
    keys = set(f.as_dict()) | {"run_id", "backend", "verdict"}  # what write_jsonl adds
    missing = sorted(keys - _documented())
    assert not missing, f"findings fields missing from docs/formats.md: {missing}"


def test_every_report_json_key_is_documented() -> None:
    schema = json.loads(resources.files("rackscale.report")
                        .joinpath("report.schema.json").read_text())
    keys = set(schema["properties"]) | set(schema["$defs"]["step"]["required"])
    keys |= set(schema["properties"]["racks"]["items"]["required"])
    keys |= set(schema["properties"]["findings"]["items"]["required"])
    missing = sorted(keys - _documented())
    assert not missing, f"report.json keys missing from docs/formats.md: {missing}"


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_do_not_point_at_files_users_lack(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for word in ("DESIGN.md", "NUMBERS.md", "shared/reference", "HELPERS.md"):
        assert word not in text, f"{doc.name} mentions {word}, which users do not have"
    for pattern in (r"\bissue\b", r"\bsession\b", r"\bhelpers?\b"):
        assert not re.search(pattern, text, re.I), f"{doc.name}: {pattern} (how it was built)"
    for ref in re.findall(r"\]\(([^)#:]+\.md)\)", text):  # relative links resolve
        assert (doc.parent / ref).is_file(), f"{doc.name} links to missing {ref}"


def test_readme_report_path_is_where_make_demo_writes_it() -> None:
    """`make demo` runs `rackscale demo` in the clone; the demo writes the report under
    ./rackscale-data/report/ of the directory it runs in."""
    from rackscale.cli.report import DEFAULT_OUT

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo:.*\n\t\$\(BIN\)/rackscale demo$", makefile, re.M)
    shown = re.search(r"^report: (\S+)$", readme, re.M)
    assert shown is not None, "README shows where the demo writes the report"
    clone = re.search(r"git clone \S+ ([\w.-]+)|`cd ([\w./-]+)`", readme)
    assert clone is not None, "README says which directory make demo runs in"
    where = clone.group(1) or clone.group(2)
    assert shown.group(1).endswith(f"/{where.strip('/').split('/')[-1]}/{DEFAULT_OUT}/"
                                   "report.html"), shown.group(1)


# Pages for people who extend rackscale (its packages, called rooms there) are not user pages.
FOR_USERS = [d for d in USER_DOCS if d.name not in ("contracts.md", "extending.md")]


@pytest.mark.parametrize("doc", FOR_USERS, ids=lambda p: p.name)
def test_user_docs_speak_the_users_words(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for pattern, why in ((r"\brooms?\b", "the code's word for a package"),
                         (r"\bZap\b", "a vendor's name for the firmware step"),
                         (r"\(W45\)", "an unexplained ASHRAE class"),
                         (r"Read first", "a reading list of source files")):
        assert not re.search(pattern, text), f"{doc.name}: {pattern} ({why})"


ETTR_PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")
                                   if "ETTR" in p.read_text(encoding="utf-8"))]


def test_ettr_pages_are_found() -> None:
    assert {"docs/simulate.md", "docs/report.md", "docs/formats.md", "docs/recovery.md",
            "docs/lab.md"} <= set(ETTR_PAGES)


@pytest.mark.parametrize("name", ETTR_PAGES)
def test_ettr_is_spelled_out_on_first_use(name: str) -> None:
    """Every page that says ETTR spells it out where it first does."""
    text = (ROOT / name).read_text(encoding="utf-8")
    body = text.split("\n", 1)[1]  # after the title
    first = body.index("ETTR")
    assert "effective training time ratio" in body[max(0, first - 200):first + 200], name


def test_readme_says_serve_needs_the_server_extra_and_stays_one_screen() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "rackscale[server]" in readme
    assert len(readme.splitlines()) <= 60


def test_recovery_doc_gives_the_heartbeat_format_and_the_compute_clock() -> None:
    text = (ROOT / "docs" / "recovery.md").read_text(encoding="utf-8")
    from rackscale.recovery.heartbeat import PHASES

    assert "### The heartbeat line format" in text
    for phase in PHASES:
        assert f"| `{phase}` |" in text, phase
    for needle in ("`t`", "`compute_s`", "`step_s`", "`restore_s`", "time.thread_time()",
                   "time.perf_counter()", "a001-r0000.jsonl"):
        assert needle in text, needle
