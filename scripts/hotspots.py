"""Long functions and long parameter lists in src/, measured with `ast`.

    python scripts/hotspots.py            # every function over the limits, longest first
    python scripts/hotspots.py --all 20   # the 20 longest functions, over the limits or not

A function counts from its `def` line to its last line (decorators and docstring included);
parameters are every name it takes except `self`/`cls` (keyword-only ones too, `*args` and
`**kwargs` count one each). tests/test_architecture.py holds src/ to these limits, with the
functions that exceed them for a stated reason listed there.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

MAX_LINES = 80
MAX_PARAMS = 6
SRC = Path(__file__).resolve().parents[1] / "src"


@dataclass(frozen=True, slots=True)
class Function:
    path: str  # relative to src/, e.g. rackscale/report/ledger.py
    name: str  # qualified inside its module: Class.method, outer.<locals>.inner
    line: int
    lines: int
    params: int

    @property
    def key(self) -> str:
        return f"{self.path}::{self.name}"

    def over(self, max_lines: int = MAX_LINES, max_params: int = MAX_PARAMS) -> bool:
        return self.lines > max_lines or self.params > max_params


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs]
    names += [p.arg for p in (a.vararg, a.kwarg) if p is not None]
    return len([n for n in names if n not in ("self", "cls")])


def functions(root: Path = SRC) -> list[Function]:
    out: list[Function] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

        def visit(node: ast.AST, prefix: str, rel: str = rel) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    name = prefix + child.name
                    start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    end = child.end_lineno or child.lineno
                    out.append(Function(rel, name, child.lineno, end - start + 1,
                                        _params(child)))
                    visit(child, f"{name}.<locals>.")
                elif isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                else:
                    visit(child, prefix)

        visit(tree, "")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", type=int, metavar="N", help="the N longest functions")
    args = ap.parse_args(argv)
    found = sorted(functions(), key=lambda f: (-f.lines, -f.params))
    shown = found[:args.all] if args.all else [f for f in found if f.over()]
    for f in shown:
        print(f"{f.lines:4d} lines {f.params:2d} params  {f.key} (line {f.line})")
    if not args.all:
        print(f"{len(shown)} functions over {MAX_LINES} lines or {MAX_PARAMS} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
