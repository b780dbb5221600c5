#!/usr/bin/env python3
"""Mutation testing of the modules that decide, with Cosmic Ray (`make mutation`).

For each module, in a private copy of the tree (Cosmic Ray mutates files in place; the working
tree is never touched), Cosmic Ray changes one operator or constant at a time and runs the
module's focused tests; a mutant that no test notices "survives". Prints a score per module and
every survivor's diff, and writes `mutation-report/<module>.json` (and `summary.json`). The
score of each module is recorded in `scripts/mutation-scores.json` with the sha256 of the module
and of its focused tests, the date and the command; `tests/test_mutation_scores.py` (part of
`make test`) fails, naming the module, once either has changed since.

Not counted (marked skipped before the run):
- mutants inside annotations: every module here has `from __future__ import annotations`, so
  annotations are strings that nothing evaluates;
- operators outside OPERATOR_SET: Cosmic Ray replaces each binary or comparison operator by
  every other one. The set keeps every swap among == != < <= > >= (five per comparison), `is`
  for `is not` and back, and one or two arithmetic swaps per operator (+ -, * /, / //, ...).
  Left out: a comparison to or from `is`/`is not` other than those two (`x == y` to `x is y`:
  on numbers and strings that depends on CPython's object caching, not on the code), and the
  arithmetic swaps across kinds (`+` to `<<`, `*` to `^`): they die on a TypeError or
  duplicate a kept mutant, so they would only lengthen the run and inflate the score;
- the equivalent mutants listed in EQUIVALENT below, each with the reason no test can tell it
  from the original.

Usage: scripts/mutation.py [MODULE ...] [--timeout S] [--jobs N] [--keep] [--recheck]
                           [--no-record]
  MODULE is a key of MODULES (e.g. certify/localize.py); all of them when omitted.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PKG = "src/rackscale"
# The recorded scores: per module, the sha256 of the module and of each focused test file it
# was measured on (written at the end of each module's full run; tests/test_mutation_scores.py
# fails when either has changed since).
SCORES = Path(__file__).resolve().parent / "mutation-scores.json"

# Each module with the fast tests that pin its decisions (seconds per run, not minutes).
MODULES: dict[str, list[str]] = {
    "certify/localize.py": ["tests/certify/test_localize.py"],
    "certify/verdict.py": ["tests/certify/test_verdict.py"],
    "lifecycle/interlocks.py": ["tests/lifecycle/test_interlocks_states.py"],
    "lifecycle/states.py": ["tests/lifecycle/test_interlocks_states.py"],
    # The controller-driven triage sequence (test_lifecycle_triage.py) is left to `make test`.
    "lifecycle/triage.py": ["tests/lifecycle/test_triage_rules.py"],
    # The controller, crash and CLI tests (test_lifecycle_*.py) are left to `make test`.
    "lifecycle/repository.py": ["tests/lifecycle/test_repository_rules.py"],
    # The ledger's property test (40 random fleets) is left to `make test`: too slow per mutant.
    "report/ledger.py": ["tests/report/test_ledger_rules.py", "tests/report/test_ledger.py",
                         "-k", "not monotone_for_any_events"],
    # The report's end-to-end tests (test_cli.py, test_statement_recompute.py) are left to
    # `make test`.
    "report/shapes.py": ["tests/report/test_shapes_rules.py"],
    # SeaweedFS-backed tests (test_integrity.py, the S3 contract) are left to `make test`.
    "checkpoint/manifest.py": ["tests/checkpoint/test_manifest_rules.py",
                               "tests/checkpoint/test_units.py",
                               "-k", "not seaweedfs and not demo_step"],
    "checkpoint/restore.py": ["tests/checkpoint/test_restore_rules.py",
                              "tests/checkpoint/test_restore_edges.py",
                              "tests/checkpoint/test_units.py",
                              "-k", "not seaweedfs and not demo_step"],
    # Real PyTorch ranks over gloo and SeaweedFS (test_multinode.py) are left to `make test`.
    "checkpoint/multinode.py": ["tests/checkpoint/test_multinode_rules.py"],
    "recovery/detect.py": ["tests/recovery/test_detect.py"],
    # test_localize.py's collective tests score recovery/detect.py's CollectiveDetector.
    "recovery/localize.py": ["tests/recovery/test_localize.py", "-k",
                             "not collective and not checkpoint_push and not attempts_start"],
    # The end-to-end CLI sequences and the property test (tests/state/test_one_truth.py,
    # test_state_property.py) are left to `make test`: seconds to minutes per run.
    "state/model.py": ["tests/state/test_conditions_rules.py"],
}

# Modules whose recorded score no longer holds and that wait for a re-score, each with why. A
# module here is reported by the staleness test (tests/test_mutation_scores.py) as pending,
# not as scored; one whose score is current again must leave this list (the test says so).
# TESTING.md's table lists them as pending with their last score as history.
RESCORE_PENDING: dict[str, str] = {
    "lifecycle/triage.py": "reworked to read raw rows and write one batch per pass (linear "
    "onboarding at 1,778 racks), and a certified rack with trays out now serves degraded at "
    "once, and its enforcement walks only the parts whose certification failed; the full "
    "re-score (about 21 minutes) is pending",
    "lifecycle/repository.py": "the per-pass row read and the one wording of a gated refusal "
    "moved here for the batched writes; the re-score (about 7 minutes) is pending",
    "state/model.py": "`entered` and `last_entered` (a part's last repair from the fleet "
    "state, not the log), then the persisted snapshot (`_encode`/`_restore`) and "
    "`failing_parts` were added; the re-score (about 10 minutes) is pending",
    # Annotation-only changes for mypy --strict (type arguments, a typed local before a
    # return): the code the mutants replace is the same, the re-scores were not run for time.
    "certify/verdict.py": "type annotations only (mypy --strict: a typed local for `failed`, "
    "one for the repeat count); the re-score (about 11 minutes) is pending",
    "report/ledger.py": "type annotations only (mypy --strict: `str()` around a stage name); "
    "the re-score (about 12 minutes) is pending",
    "checkpoint/manifest.py": "type annotations only (mypy --strict: dict type arguments); the "
    "re-score (about 16 minutes) is pending",
    "checkpoint/multinode.py": "type annotations only (mypy --strict: dict type arguments, a "
    "typed local for a parsed part); the re-score (about 9 minutes) is pending",
    "checkpoint/restore.py": "a restore now checks the region tier (one HEAD per item) even "
    "when the cache or a replica served it, so an object deleted there is copied back; the "
    "re-score (about 9 minutes) is pending",
}

# The operators scored (full names match); see the docstring and TESTING.md. Comparisons: each
# of == != < <= > >= is replaced by every other of the six (5 mutants per comparison), `is` and
# `is not` by each other; numbers by +1 and -1; and/or; True/False; `not` added and removed.
_CMP = "Eq|NotEq|Lt|LtE|Gt|GtE"
OPERATOR_SET = re.compile("core/(" + "|".join([
    r"ReplaceBinaryOperator_(Add_Sub|Sub_Add|Mul_Div|Div_Mul|FloorDiv_Div|Div_FloorDiv"
    r"|Mod_FloorDiv|Pow_Mul|BitOr_BitAnd|BitAnd_BitOr|BitXor_BitOr|LShift_RShift|RShift_LShift)",
    rf"ReplaceComparisonOperator_({_CMP})_({_CMP})",
    r"ReplaceComparisonOperator_(Is_IsNot|IsNot_Is)",
    r"ReplaceUnaryOperator_Delete_\w+",
    r"NumberReplacer", r"AddNot", r"ZeroIterationForLoop", r"Replace(True|False)With(True|False)",
    r"Replace(And|Or)With(And|Or)", r"Replace(Continue|Break)With(Continue|Break)",
    r"RemoveDecorator", r"ExceptionReplacer",
]) + ")$")


@dataclass(frozen=True, slots=True)
class Equivalent:
    """Mutants no test can kill: `operator` (regex, full name) whose mutated token ends where
    `context` (regex) matches the end of its source line's text up to that token, in `module`
    ("*" for any); `why` goes into the report and TESTING.md."""

    module: str
    operator: str
    context: str
    why: str
    number_offset: int | None = None  # NumberReplacer only: +1 or -1 (None: both)


EQUIVALENT: list[Equivalent] = [
    Equivalent("lifecycle/states.py", "ReplaceComparisonOperator_LtE_Eq", r"if bad <=",
               "bad is a count of trays out of service: never negative, so <= 0 is == 0"),
    Equivalent("*", "ReplaceTrueWithFalse", r"slots=True",
               "slots=False only costs memory: no behaviour reads __slots__"),
    Equivalent("*", "ReplaceTrueWithFalse", r"zip\(.*strict=True",
               "the zipped sequences have equal lengths by construction; strict only guards "
               "against a future bug"),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_LtE_Lt",
               r"worst = o1 if o1\.rel <=",
               "on a tie both halves fail equally badly: either outcome is the shared part's"),
    Equivalent("certify/localize.py", "NumberReplacer",
               r"hits = \[\(int\(members\[0|hits = \[\(int\(members\[0\]\), outs\[0"
               r"|hits = \[\(int\(members\[0\]\), outs\[0\]\)\] if outs\[0",
               "a group of one: index 0 and -1 are the same element", number_offset=-1),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_Eq_GtE",
               r"and len\(hits\) ==",
               "hits are members that failed: never more of them than members, so >= is =="),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_Eq_LtE",
               r"elif len\(members\) ==|^\s*if n ==",
               "a group holds at least one GPU (an empty group cannot fail a test): <= 1 is == 1"),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_Gt_NotEq",
               r"range\(n if n >",
               "the ring is laid for groups of two or three (one is tested alone, four or more "
               "are halved): for n in {2, 3}, n != 2 is n > 2"),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_Eq_GtE",
               r'return sp\.kind ==',
               "a suspect's kind is member, common or unresolved: of these only 'unresolved' "
               "sorts at or after 'unresolved'"),
    Equivalent("certify/localize.py", "ReplaceComparisonOperator_Gt_NotEq",
               r'and len\(sp\.trail\) >',
               "every suspect is made by bisect with its group's own step first in its trail: "
               "a trail is never empty, so != 1 is > 1"),
    Equivalent("checkpoint/multinode.py", "ReplaceComparisonOperator_Eq_LtE",
               r"return self\.rank ==|return \"\" if self\.rank ==",
               "a SavePart refuses a negative rank when it is made: rank <= 0 is rank == 0"),
    Equivalent("checkpoint/multinode.py", "ReplaceBinaryOperator_Mul_Div",
               r"def _parts\(self, store: ObjectStore, ckpt_id: str, \*",
               "the keyword-only marker of a private method made positional-only: its callers "
               "pass `complete` by name, which both accept"),
    Equivalent("checkpoint/multinode.py", "ReplaceTrueWithFalse",
               r"json\.dumps\(rec, sort_keys=True",
               "sort_keys only orders the keys in the part record's file: every reader parses "
               "the JSON"),
    Equivalent("checkpoint/multinode.py", "ReplaceComparisonOperator_NotEq_Lt",
               r"if len\(set\(names\)\) !=",
               "a set of names is never longer than the list it is made of: != is <"),
    Equivalent("checkpoint/multinode.py", "ReplaceComparisonOperator_NotEq_Lt",
               r"if len\(parts\) !=",
               "_parts keeps one record per rank below the world: never more than world, so "
               "!= is <"),
    Equivalent("recovery/detect.py", "NumberReplacer",
               r"not \(codes\[r\] or 0\) < 0|code is not None and code < 0",
               "only ranks with a non-zero exit code are ranked: for a non-zero integer, < 0, "
               "<= 0 and < 1 agree (< -1 is killed: SIGHUP is -1)", number_offset=+1),
    Equivalent("recovery/detect.py", "ReplaceComparisonOperator_Lt_LtE",
               r"not \(codes\[r\] or 0\) <|code is not None and code <",
               "only ranks with a non-zero exit code are ranked: for a non-zero integer, < 0 "
               "and <= 0 agree"),
    Equivalent("recovery/detect.py", "NumberReplacer", r"not \(codes\[r\] or 0",
               "only ranks with a non-zero exit code are ranked: `codes[r] or 0` never falls "
               "back to its 0"),
    Equivalent("recovery/detect.py", "NumberReplacer", r"round\(smooth\[worst\] or 0\.0",
               "the flagged rank was scored, so it has a time, and a time of zero scores fast "
               "(never flagged): the fallback is never taken"),
    Equivalent("recovery/detect.py", "NumberReplacer", r"self\.scored_to = -1",
               "steps are numbered from 0: -1 and -2 both precede every step",
               number_offset=+1),
    Equivalent("report/ledger.py", "ReplaceUnaryOperator_Delete_USub",
               r"""rsplit\(["']/["'], 1\)\[-1?""",
               "component ids always hold a '/': rsplit('/', 1) has two parts, [1] is [-1]"),
    Equivalent("report/ledger.py", "NumberReplacer", r"""rsplit\(["']/["'], 1""",
               "the last part of an id is the same whatever the split limit above zero",
               number_offset=+1),
    Equivalent("report/ledger.py", "NumberReplacer", r'"goodput_loss": round\(certified - count, 1',
               "certified is whole and count has one decimal: the loss has no second decimal",
               number_offset=+1),
    Equivalent("report/ledger.py", "NumberReplacer", r"and gpus\.size > 0",
               "every NVLink domain of the rack templates holds GPUs: size > -1 and > 0 agree",
               number_offset=-1),
    Equivalent("checkpoint/restore.py", "ReplaceBinaryOperator_Sub_Add", r"data = f\.read\(end -",
               "the local re-read runs only for a chunk _fill found bad: a longer read is just as "
               "bad, and the chunk is fetched from a remote tier either way"),
    Equivalent("checkpoint/restore.py", "ReplaceBinaryOperator_Sub_Add",
               r"data = f\.read\(min\(m\.chunk_size, it\.size -",
               "_fill checks a cached file only when its size is the item's: a read asking for "
               "more than the bytes left stops at the end of the file, so it reads the same"),
    Equivalent("checkpoint/manifest.py", "NumberReplacer",
               r"return json\.dumps\(asdict\(self\), indent= ?1",
               "the indent is whitespace in the file only: every reader parses the JSON, and "
               "the checkpoint hash is taken over a canonical form, not the file's bytes"),
    Equivalent("checkpoint/manifest.py", "ReplaceTrueWithFalse",
               r"return json\.dumps\(asdict\(self\), indent=1, sort_keys=True",
               "sort_keys only orders the keys in the file: asdict writes them in the dataclass's "
               "fixed order anyway, and every reader parses the JSON"),
    Equivalent("checkpoint/restore.py", "NumberReplacer",
               r"for n in range\(1, max\( ?1", "a repair upload with an extra empty last part "
               "writes the same bytes", number_offset=+1),
    Equivalent("lifecycle/interlocks.py", "ReplaceComparisonOperator_NotEq_Gt",
               r"or due !=",
               "a list that is not sorted compares greater than its sorted copy (at the first "
               "place they differ the sorted one holds the smaller value), so > is !="),
    Equivalent("recovery/localize.py", "NumberReplacer", r"nbytes: int = 512( << 10)?",
               "the pair probe's message size: each pair is judged against the reference's "
               "pair of the same size, so any size the probe accepts gives the same decision"),
    Equivalent("recovery/localize.py", "NumberReplacer", r"runs\[0",
               "every repeat of one probe on one backend has the same unit and source, and "
               "with two repeats index 1 and -1 are the same run"),
    Equivalent("recovery/localize.py", "NumberReplacer", r"= m\.values\[0",
               "a pair probe runs one group: its values hold one figure, so 0 and -1 agree",
               number_offset=-1),
    Equivalent("report/ledger.py", "ReplaceComparisonOperator_Gt_GtE", r"and gpus\.size >",
               "every NVLink domain of the rack templates holds GPUs: size >= 0 and > 0 agree"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_LtE",
               r"scalars\(select\(LifecycleRow\)\.where\(LifecycleRow\.machine =="
               r"|if row\.machine ==",
               "a lifecycle row's machine is rack or tray: only 'rack' sorts at or before 'rack'"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_GtE",
               r"^\s*LifecycleRow\.machine =="
               r"|q = select\(LifecycleRow\)\.where\(LifecycleRow\.machine ==",
               "a lifecycle row's machine is rack or tray: only 'tray' sorts at or after 'tray'"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_LtE",
               r"q = select\(LifecycleRow\)\.where\(LifecycleRow\.machine ==",
               "the rack rows the wider query adds are in burn_in (a rack is never in triage), "
               "and a rack in burn_in is not serving: _trays_back skips them"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_LtE",
               r"^ {8}if row\.state ==",
               "_trays_back reads trays in burn_in or triage only: of these only burn_in sorts "
               "at or before burn_in"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_LtE",
               r"^\s*if holder\.level ==",
               "a holder's level is tray, rack, fabric or region: only 'fabric' sorts at or "
               "before 'fabric'"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_NotEq_Gt",
               r"elif p\.verdict !=",
               "a finding's verdict is fail, warn or pass (the payload model refuses others): "
               "'fail' sorts first, so > 'fail' is != 'fail'"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Eq_LtE",
               r"row\.fault_tier ==|and bad ==",
               "a coolant-fault tier and a count of bad trays are never negative: <= 0 is == 0"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Lt_NotEq", r"and 0 <",
               "a count of bad trays is never negative: 0 != bad is 0 < bad"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_LtE_Lt",
               r"if cond is None or cond\.seq <=",
               "the failing certification and the last repair are different events: their seqs "
               "are never equal"),
    Equivalent("lifecycle/triage.py", "ReplaceComparisonOperator_Gt_NotEq", r"if newest >",
               "newest is the max of the findings' seqs with start as its default: never below "
               "start, so != is >"),
    Equivalent("lifecycle/triage.py", "ReplaceAndWithOr",
               r"if st not in BAD_TRAY_STATES and",
               "every tray state outside BAD_TRAY_STATES may move to triage and none inside may "
               "(the transition table): either test alone decides"),
    Equivalent("lifecycle/repository.py", "NumberReplacer", r"mapped_column\(String\(\d+",
               "a VARCHAR's length one more or one less: the ids, names and states stored are "
               "far shorter than every bound (and SQLite does not enforce them)"),
    Equivalent("lifecycle/repository.py", "ReplaceTrueWithFalse", r"index=True",
               "an index only speeds up the query by rack: every read gets the same rows"),
    Equivalent("lifecycle/repository.py", "NumberReplacer", r"default=0",
               "the column default of fault_tier is never used: enroll, the only place that "
               "makes a lifecycle row, sets fault_tier=0 itself"),
    Equivalent("lifecycle/repository.py", "ReplaceComparisonOperator_Eq_GtE",
               r"LifecycleRow\.rack == rack, LifecycleRow\.machine ==",
               "a lifecycle row's machine is rack or tray: only 'tray' sorts at or after 'tray'"),
    Equivalent("lifecycle/repository.py", "ReplaceComparisonOperator_Eq_LtE",
               r"states = RACK_REPAIR_STATES if row\.machine ==",
               "a lifecycle row's machine is rack or tray: only 'rack' sorts at or before 'rack'"),
    Equivalent("lifecycle/repository.py", "ReplaceComparisonOperator_NotEq_Lt",
               r"\.rowcount !=",
               "the compare-and-set updates by primary key: it changes one row or none, so "
               "rowcount < 1 is rowcount != 1"),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Eq_GtE",
               r't\["healthy_gpus"\] ==',
               "a tray's healthy GPUs are some of its GPUs: never more, so >= is =="),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Gt_(GtE|NotEq)",
               r't\["healthy_gpus"\] == t\["gpus"\] >',
               "the ledger's tray rows are made from the trays' GPUs: every row has at least "
               "one, so >= 0 and != 0 are > 0"),
    Equivalent("report/shapes.py", "NumberReplacer", r't\["healthy_gpus"\] == t\["gpus"\] > 0',
               "the ledger's tray rows are made from the trays' GPUs: every row has at least "
               "one, so > -1 is > 0", number_offset=-1),
    Equivalent("report/shapes.py", "NumberReplacer", r"if g >= 2",
               "the other half of the test, g % 2 == 0, leaves only even g: g >= 1 is g >= 2",
               number_offset=-1),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Eq_LtE",
               r'"headline": rule\.scope ==|^\s*if rule\.scope ==',
               "a shape's scope is domain or trays: only 'domain' sorts at or before 'domain'"),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Eq_LtE", r"and rule\.trays_out ==",
               "a ShapeRule refuses negative trays_out: <= 0 is == 0"),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Eq_(LtE|GtE)",
               r"and \(rule\.name ==",
               "of a template's shapes only its whole-domain one is a domain shape with no trays "
               "out, so the names compared are equal whenever they are compared"),
    Equivalent("report/shapes.py", "ReplaceComparisonOperator_Eq_LtE", r"and g % 2 ==?",
               "a remainder of division by 2 is 0 or 1: <= 0 is == 0"),
    Equivalent("report/shapes.py", "ReplaceFalseWithTrue", r"healthy_tray\.get\(t, False",
               "the ledger has a tray row for every tray of the topology (both are made from "
               "its GPUs' trays): the default is never taken"),
    Equivalent("report/shapes.py", "ReplaceContinueWithBreak", r"^\s*continue",
               "every NVLink domain of the topology holds GPUs, so trays: a domain with none, "
               "where the loop would go on or stop, never comes"),
]


def _annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    spans = []
    for node in ast.walk(ast.parse(source)):
        anns: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            anns.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            anns.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            anns.append(node.annotation)
        for a in anns:
            if a is not None:
                spans.append(((a.lineno, a.col_offset), (a.end_lineno, a.end_col_offset)))
    return spans


def _skip_reason(module: str, lines: list[str], spans, mu) -> str | None:
    op, start, end = mu.operator_name, mu.start_pos, mu.end_pos
    # NumberReplacer yields +1 then -1 for each number, numbering occurrences across the module.
    offset = (1 if mu.occurrence % 2 == 0 else -1) if op.endswith("NumberReplacer") else None
    if not OPERATOR_SET.match(op):
        return "operator not in the set"
    # Cosmic Ray's positions are (1-based line, 0-based column), like ast's.
    if any(s <= tuple(start) and tuple(end) <= e for s, e in spans):
        return "annotation (not evaluated)"
    upto = lines[end[0] - 1][:end[1]]
    for eq in EQUIVALENT:
        if eq.module in ("*", module) and re.search(eq.operator, op) and \
                eq.number_offset in (None, offset) and re.search(f"(?:{eq.context})$", upto):
            return f"equivalent: {eq.why}"
    return None


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_files(tests: list[str]) -> list[str]:
    """The test files among a module's pytest arguments (not the `-k` expressions)."""
    return sorted({t.split("::")[0] for t in tests if t.split("::")[0].endswith(".py")})


def fingerprint(module: str, tests: list[str], root: Path = ROOT) -> dict[str, object]:
    """What a score is a score of: the module's and its focused tests' sha256, and the
    arguments the tests are run with."""
    return {"module_sha256": _sha256(root / PKG / module),
            "tests_sha256": {t: _sha256(root / t) for t in test_files(tests)},
            "test_args": list(tests)}


def stale_scores(root: Path = ROOT, scores: Path = SCORES,
                 modules: dict[str, list[str]] | None = None,
                 pending: dict[str, str] | None = None) -> list[str]:
    """One line per module of `modules` (MODULES) whose recorded score is missing or was
    measured on another version of the module or its focused tests; empty when all hold."""
    if pending is None:  # the project's pending list goes with the project's modules
        pending = RESCORE_PENDING if modules is None else {}
    modules = MODULES if modules is None else modules
    recorded = json.loads(scores.read_text()) if scores.exists() else {}
    problems = [f"{m}: pending a re-score but not in MODULES; drop it from RESCORE_PENDING"
                for m in pending if m not in modules]
    for module, tests in modules.items():
        again = f"re-score it: make mutation MODULES={module}"
        rec = recorded.get(module)
        changed = _changed(module, tests, root, rec)
        if module in pending:
            if rec is not None and not changed:
                problems.append(f"{module}: its score is current again; drop it from "
                                "RESCORE_PENDING")
            continue
        if rec is None:
            problems.append(f"{module}: no recorded mutation score in {scores.name}; {again}")
        elif changed:
            problems.append(f"{module}: changed since its mutation score of {rec['date']} "
                            f"({', '.join(changed)}); {again}")
    return problems


def _changed(module: str, tests: list[str], root: Path,
             rec: dict[str, Any] | None) -> list[str]:
    """What changed since the record `rec` was measured (empty: it holds, or no record)."""
    if rec is None:
        return []
    now = fingerprint(module, tests, root)
    changed = [f"{PKG}/{module}"] if now["module_sha256"] != rec["module_sha256"] else []
    changed += [t for t, h in now["tests_sha256"].items()  # type: ignore[attr-defined]
                if rec["tests_sha256"].get(t) != h]
    if now["test_args"] != rec["test_args"]:
        changed.append("its focused tests in MODULES")
    return changed


_SCORES_LOCK = threading.Lock()


def _record(res: dict[str, object], fp: dict[str, object], timeout: float,
            load: float) -> None:
    """Write a full run's score into SCORES, with what it was measured on."""
    module = str(res["module"])
    entry = {
        "date": datetime.date.today().isoformat(),
        "command": f"make mutation MODULES={module}"
                   + ("" if timeout == 60.0 else f" (scripts/mutation.py --timeout {timeout:g})"),
        **fp,
        "killed": res["killed"], "scored": res["scored"], "score": res["score"],
        "equivalent_excluded": len(res["equivalent_excluded"]),  # type: ignore[arg-type]
        "not_scored": res["not_scored"], "errors": res["errors"],
        "survivors": [s["where"] for s in res["survivors"]],  # type: ignore[attr-defined]
        "seconds": res["seconds"], "load_average": round(load, 1),
        "operator_set": OPERATOR_SET.pattern,
    }
    with _SCORES_LOCK:
        recorded = json.loads(SCORES.read_text()) if SCORES.exists() else {}
        recorded[module] = entry
        SCORES.write_text(json.dumps(dict(sorted(recorded.items())), indent=2) + "\n")


def _copy_tree(dst: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis", "rackscale-data")
    for name in ("src", "tests"):
        shutil.copytree(ROOT / name, dst / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", dst / "pyproject.toml")


FORKSERVER = Path(__file__).resolve().parent / "mutation_forkserver.py"


def _config(module_path: Path, tests: list[str], timeout: float, sock: Path) -> str:
    cmd = [sys.executable, str(FORKSERVER), "run", str(sock), "--", "-x", "-q",
           "-p", "no:cacheprovider", *tests]
    return "\n".join([
        "[cosmic-ray]",
        f"module-path = {json.dumps(str(module_path))}",
        f"timeout = {timeout + 30}",  # the fork server stops a run at `timeout` itself
        "excluded-modules = []",
        f"test-command = {json.dumps(shlex.join(cmd))}",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "",
    ])


def _cr(tool: str, *args: str, cwd: Path, env: dict[str, str]) -> None:
    exe = Path(sys.executable).parent / tool
    subprocess.run([str(exe), *args], cwd=cwd, env=env, check=True)


def _mark_skips(db_path: Path, module: str, source_path: Path) -> dict[str, str]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = source_path.read_text()
    lines, spans = source.splitlines(), _annotation_spans(source)
    skipped: dict[str, str] = {}
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item in list(db.pending_work_items):
            mu = item.mutations[0]
            why = _skip_reason(module, lines, spans, mu)
            if why:
                skipped[item.job_id] = why
                db.set_result(item.job_id, WorkResult(output=why,
                                                      worker_outcome=WorkerOutcome.SKIPPED))
    return skipped


def _collect(db_path: Path, skipped: dict[str, str]) -> dict[str, object]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    killed = survived = incompetent = filtered = 0
    survivors, excluded = [], []
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            mu = item.mutations[0]
            where = f"{mu.operator_name} line {mu.start_pos[0]}"
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                if item.job_id in skipped and skipped[item.job_id].startswith("equivalent"):
                    excluded.append(f"{where}: {skipped[item.job_id]}")
                filtered += 1
            elif result.worker_outcome != WorkerOutcome.NORMAL:
                incompetent += 1  # the mutant could not even be applied or run: not scored
            elif result.test_outcome == TestOutcome.SURVIVED:
                survived += 1
                survivors.append({"where": where, "diff": result.diff})
            else:
                killed += 1
    scored = killed + survived
    return {"killed": killed, "survived": survived, "scored": scored,
            "score": round(100.0 * killed / scored, 1) if scored else None,
            "not_scored": filtered, "errors": incompetent,
            "equivalent_excluded": excluded, "survivors": survivors}


def _wait_for(sock: Path, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not sock.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the pytest fork server did not start (exit {server.poll()})")
        time.sleep(0.1)


def run_module(module: str, timeout: float, keep: bool, out_dir: Path,
               record: bool = True) -> dict[str, object]:
    tests = MODULES[module]
    work = Path(tempfile.mkdtemp(prefix="rackscale-mutation-"))
    try:
        _copy_tree(work)
        fp = fingerprint(module, tests, work)  # what is scored: the files as copied
        load = os.getloadavg()[0]
        # No bytecode: a mutant written within the same second as the last one, with the same
        # size, would otherwise be run from the stale .pyc. One BLAS thread: the server forks.
        env = {**os.environ, "PYTHONPATH": str(work / "src"), "PYTHONDONTWRITEBYTECODE": "1",
               "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        cfg, db, sock = work / "cr.toml", work / "session.sqlite", work / "pytest.sock"
        cfg.write_text(_config(Path(PKG) / module, tests, timeout, sock))
        server = subprocess.Popen([sys.executable, str(FORKSERVER), "serve", str(sock),
                                   str(timeout)], cwd=work, env=env)
        try:
            _wait_for(sock, server)
            _cr("cosmic-ray", "init", str(cfg), str(db), cwd=work, env=env)
            skipped = _mark_skips(db, module, work / PKG / module)
            _cr("cosmic-ray", "baseline", str(cfg), cwd=work, env=env)
            t0 = time.monotonic()
            _cr("cosmic-ray", "exec", str(cfg), str(db), cwd=work, env=env)
        finally:
            server.terminate()
            server.wait(timeout=30)
        res = _collect(db, skipped)
        res.update(module=module, tests=tests, seconds=round(time.monotonic() - t0))
    finally:
        if keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    (out_dir / (module.replace("/", "__") + ".json")).write_text(json.dumps(res, indent=2))
    if record:
        _record(res, fp, timeout, load)
    return res


def _changed_token(diff: str) -> tuple[str, float | None]:
    """From a one-line mutant's diff: the original line up to the end of the mutated token,
    and for a changed number the offset applied."""
    body = [ln for ln in diff.splitlines()[1:] if not ln.startswith(("---", "+++"))]
    old = next(ln[1:] for ln in body if ln.startswith("-"))
    new = next(ln[1:] for ln in body if ln.startswith("+"))
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    end = len(old) - s
    while end < len(old) and (old[end].isalnum() or old[end] in "_."):
        end += 1  # the common tail of True/False, 0.5/1.5 belongs to the token
    try:
        offset = float(new[p:len(new) - s]) - float(old[p:len(old) - s])
    except ValueError:
        offset = None
    return old[:end], offset


def _equivalent_survivor(module: str, sv: dict) -> str | None:
    op = sv["where"].split()[0]
    upto, offset = _changed_token(sv["diff"])
    for eq in EQUIVALENT:
        if eq.module in ("*", module) and re.search(eq.operator, op) and \
                eq.number_offset in (None, offset) and re.search(f"(?:{eq.context})$", upto):
            return f"equivalent: {eq.why}"
    return None


def recheck(module: str, out_dir: Path, timeout: float) -> dict[str, object]:
    """Re-score the survivors of a module's last report against the tests and equivalents as
    they are now: each survivor's diff is applied to a fresh copy and the tests run once."""
    path = out_dir / (module.replace("/", "__") + ".json")
    res = json.loads(path.read_text())
    still, now_killed = [], []
    for sv in res["survivors"]:
        why = _equivalent_survivor(module, sv)
        if why:
            res["equivalent_excluded"].append(f"{sv['where']}: {why}")
            res["scored"] -= 1
            continue
        work = Path(tempfile.mkdtemp(prefix="rackscale-recheck-"))
        try:
            _copy_tree(work)
            patch = "\n".join(sv["diff"].splitlines()[1:]) + "\n"
            subprocess.run(["patch", "-p1", "-s"], input=patch, text=True, cwd=work, check=True)
            env = {**os.environ, "PYTHONPATH": str(work / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
            try:
                run = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p",
                                      "no:cacheprovider", *MODULES[module]], cwd=work, env=env,
                                     capture_output=True, text=True, timeout=timeout)
                rc, out = run.returncode, run.stdout
            except subprocess.TimeoutExpired:
                rc, out = 124, "FAILED (timeout)"
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if rc in (0, 124):  # a run cut off by the timeout proves nothing: still a survivor
            still.append(sv)
        else:  # name the test that caught it: evidence that the kill is not a broken run
            failed = [ln.split(" - ")[0] for ln in out.splitlines() if ln.startswith("FAILED")]
            now_killed.append(f"{sv['where']}: {failed[0] if failed else f'exit {rc}'}")
    res["killed"] += len(now_killed)
    res["survived"] = len(still)
    res["survivors"] = still
    res["killed_on_recheck"] = res.get("killed_on_recheck", []) + now_killed
    res["score"] = round(100.0 * res["killed"] / res["scored"], 1) if res["scored"] else None
    path.write_text(json.dumps(res, indent=2))
    return res


def table(scores: Path = SCORES) -> str:
    """The recorded scores as TESTING.md's "Last scores" rows."""
    rows = ["| module | killed / scored | score | equivalent excluded | survivors | date | "
            "module sha256 | command |", "|---|---|---|---|---|---|---|---|"]
    for module, r in json.loads(scores.read_text()).items():
        rows.append(f"| `{module}` | {r['killed']} / {r['scored']} | {r['score']}% | "
                    f"{r['equivalent_excluded']} | {len(r['survivors'])} | {r['date']} | "
                    f"`{r['module_sha256'][:12]}` | `{r['command']}` |")
    return "\n".join(rows)


def equivalents() -> str:
    """EQUIVALENT as TESTING.md's list."""
    def offset(eq: Equivalent) -> str:
        if eq.number_offset is None:
            return " (both)" if eq.operator == "NumberReplacer" else ""
        return f" ({eq.number_offset:+d})"
    return "\n".join(f"- `{eq.module}`, {eq.operator}{offset(eq)} after `{eq.context}`: "
                     f"{eq.why}." for eq in EQUIVALENT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help=f"any of: {', '.join(MODULES)}")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per test run")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copy")
    ap.add_argument("--jobs", type=int, default=1, help="modules run at once (default 1)")
    ap.add_argument("--out", default=str(ROOT / "mutation-report"))
    ap.add_argument("--recheck", action="store_true",
                    help="re-score the survivors of the last run against the tests as they are "
                         "(a development aid: it does not update the recorded score)")
    ap.add_argument("--no-record", action="store_true",
                    help=f"do not write the scores into {SCORES.name}")
    ap.add_argument("--table", action="store_true",
                    help=f"print the scores recorded in {SCORES.name} and the equivalent "
                         "mutants as TESTING.md's Markdown")
    args = ap.parse_args(argv)
    if args.table:
        print(table() + "\n\n" + equivalents())
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        print(f"unknown module {unknown[0]!r}; valid modules: {', '.join(MODULES)}",
              file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    def one(m: str) -> dict[str, object]:
        if args.recheck:
            return recheck(m, out_dir, args.timeout)
        return run_module(m, args.timeout, args.keep, out_dir, record=not args.no_record)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(one, args.modules or list(MODULES)))
    print("\nmodule                      killed/scored  score  not scored  time")
    for r in results:
        print(f"{r['module']:<28}{r['killed']:>6}/{r['scored']:<7}{r['score']!s:>6}%"
              f"{r['not_scored']:>11}{r['seconds']:>6}s")
        for s in r["survivors"]:
            print(f"  survived: {s['where']}\n" + "\n".join(
                "    " + ln for ln in (s["diff"] or "").splitlines()
                if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))))
    everything = [json.loads((out_dir / (m.replace("/", "__") + ".json")).read_text())
                  for m in MODULES if (out_dir / (m.replace("/", "__") + ".json")).exists()]
    (out_dir / "summary.json").write_text(json.dumps(
        [{k: r.get(k) for k in ("module", "killed", "scored", "score", "seconds")}
         for r in everything], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
