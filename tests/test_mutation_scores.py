"""A recorded mutation score holds only for the code it was measured on (TESTING.md, "Mutation
testing"): scripts/mutation-scores.json keeps, per scored module, the sha256 of the module and
of its focused tests; this fails, naming the module and the command that re-scores it, once
either has changed. Pure file hashing: well under a second."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _mutation() -> Any:
    spec = importlib.util.spec_from_file_location("mutation", ROOT / "scripts" / "mutation.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_every_module_in_make_mutation_is_scored_on_its_current_code_and_tests() -> None:
    problems = _mutation().stale_scores()
    assert not problems, "mutation scores out of date:\n" + "\n".join(problems)


def _scored_copy(tmp_path: Path) -> tuple[Any, Path, dict[str, list[str]]]:
    """A copy of one scored module and its tests under tmp_path, with a record of their
    current hashes, as a run of the module would write it."""
    mut = _mutation()
    modules = {"certify/localize.py": ["tests/certify/test_localize.py", "-k", "not slow"]}
    for rel in [f"{mut.PKG}/certify/localize.py", "tests/certify/test_localize.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tmp_path / rel)
    scores = tmp_path / "mutation-scores.json"
    scores.write_text(json.dumps({m: {"date": "2026-12-02", **mut.fingerprint(m, t, tmp_path)}
                                  for m, t in modules.items()}))
    return mut, scores, modules


def test_a_score_holds_while_neither_the_module_nor_its_tests_change(tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    assert mut.stale_scores(tmp_path, scores, modules) == []


def test_an_edited_module_is_named_with_the_command_that_re_scores_it(tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    src = tmp_path / mut.PKG / "certify/localize.py"
    src.write_text(src.read_text().replace("len(sp.trail) > 1", "len(sp.trail) >= 1"))
    [problem] = mut.stale_scores(tmp_path, scores, modules)
    assert problem.startswith("certify/localize.py: changed since its mutation score of "
                              "2026-12-02 (src/rackscale/certify/localize.py)")
    assert problem.endswith("make mutation MODULES=certify/localize.py")


def test_an_edited_focused_test_makes_its_module_stale(tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    with (tmp_path / "tests/certify/test_localize.py").open("a") as f:
        f.write("\n# one more line\n")
    [problem] = mut.stale_scores(tmp_path, scores, modules)
    assert "(tests/certify/test_localize.py)" in problem


def test_a_changed_test_selection_makes_its_module_stale(tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    [problem] = mut.stale_scores(tmp_path, scores, {"certify/localize.py": modules[
        "certify/localize.py"][:1]})
    assert "(its focused tests in MODULES)" in problem


def test_a_module_without_a_recorded_score_is_named(tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    more = {**modules, "recovery/detect.py": ["tests/recovery/test_detect.py"]}
    [problem] = mut.stale_scores(tmp_path, scores, more)
    assert problem == ("recovery/detect.py: no recorded mutation score in mutation-scores.json;"
                       " re-score it: make mutation MODULES=recovery/detect.py")


def test_a_pending_module_is_not_counted_as_scored_and_leaves_once_re_scored(
        tmp_path: Path) -> None:
    mut, scores, modules = _scored_copy(tmp_path)
    why = {"certify/localize.py": "changed after its score"}
    # current again: the pending entry must go
    [problem] = mut.stale_scores(tmp_path, scores, modules, why)
    assert problem.startswith("certify/localize.py: its score is current again")
    src = tmp_path / mut.PKG / "certify/localize.py"
    src.write_text(src.read_text() + "\n")
    assert mut.stale_scores(tmp_path, scores, modules, why) == []  # pending, said so
    assert mut.stale_scores(tmp_path, scores, modules, {}) != []  # else it is stale
    gone = mut.stale_scores(tmp_path, scores, modules, {"report/nothing.py": "x"})
    assert gone[0].startswith("report/nothing.py: pending a re-score but not in MODULES")


def test_every_pending_module_says_why() -> None:
    mut = _mutation()
    assert all(len(why) > 10 for why in mut.RESCORE_PENDING.values())
    assert set(mut.RESCORE_PENDING) <= set(mut.MODULES)
