"""Reading operator files safely: size cap, text only, YAML with an expansion budget.

Every file an operator hands rackscale (fleet spec, faults file, tiers config, report input)
goes through `read_text` and, for YAML, `compose_yaml` + `build_yaml`. The caps exist because
an unbounded input is a hang, not an error: a YAML alias bomb expands without end, a 50 MB spec
takes minutes, a binary file or a NUL byte gives a decoder traceback. Each cap's error names
the cap and what to do. This module imports nothing of rackscale but errors, so every room
(checkpoint/ included) may use it.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

import yaml

from rackscale.errors import UserError

# A fleet spec of ~128k GPUs is a few kB and a faults file with 10,000 faults ~0.6 MB; 4 MiB
# leaves room and keeps a parse under a few seconds.
MAX_FILE_BYTES = 4 << 20
# Values built from one YAML document, and of those, values reached again through aliases
# (`*name`). Real specs use few aliases; a billion-laughs document needs millions.
MAX_YAML_VALUES = 1_000_000
MAX_ALIAS_VALUES = 10_000
# Deeper than any format of ours (the fleet spec nests 5 levels).
MAX_DEPTH = 32

Path = tuple[str | int, ...]


class InputError(UserError):
    """A file that cannot be read as the text it should be. The message names file and fix."""


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def read_text(path: str | os.PathLike[str], what: str, *,
              max_bytes: int = MAX_FILE_BYTES,
              error: type[UserError] = InputError) -> str:
    """The text of `path`, refused (as `error`) if missing, a directory, too big or binary."""
    p = os.fspath(path)
    try:
        st = os.stat(p)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{p}: is a directory; give the path of a {what} file")
        if not stat.S_ISREG(st.st_mode):
            # A FIFO with no writer blocks the read forever; a device has no end.
            raise error(f"{p}: is a {_file_kind(st.st_mode)}, not a regular file; give the "
                        f"path of a {what} file")
        size = st.st_size
        if size > max_bytes:
            raise error(f"{p}: {size} bytes is over the {max_bytes >> 20} MiB cap for a {what} "
                        "file; a real one is far smaller. Check that this is the right file.")
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise error(f"{p}: cannot read it: no such file; give the path of a {what} file") from None
    except OSError as err:
        raise error(f"{p}: cannot read it ({err.strerror})") from None
    return decode_text(raw, p, what, error=error)


def decode_text(raw: bytes, filename: str, what: str, *,
                error: type[UserError] = InputError) -> str:
    if b"\0" in raw:
        raise error(f"{filename}: holds NUL bytes, so it is a binary file, not a {what}; "
                    "give the YAML/JSON text file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise error(f"{filename}:{line}: not UTF-8 text (byte {err.start}); a {what} is a "
                    "UTF-8 text file. Save it as UTF-8.") from None
    return text.removeprefix("\ufeff")


def compose_yaml(text: str, filename: str, *,
                 error: type[UserError] = InputError) -> yaml.Node | None:
    """The YAML node tree of `text`; syntax errors name the line."""
    if len(text) > MAX_FILE_BYTES:
        raise error(f"{filename}: over the {MAX_FILE_BYTES >> 20} MiB cap for a YAML file")
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = err.problem or err.context or "syntax error"
        opened = ""
        if err.context and err.context_mark is not None and err.context_mark is not mark:
            # e.g. an unclosed bracket: the problem shows at the end, the cause where it opened
            opened = f" ({err.context} at line {err.context_mark.line + 1})"
        raise error(
            f"{filename}{line}: YAML syntax error: {problem}{opened}. Fix the YAML there "
            f"(check indentation, colons and brackets)."
        ) from None
    except yaml.YAMLError as err:  # ReaderError: control characters the YAML spec forbids
        raise error(f"{filename}: not a YAML text file ({err}). Remove the control "
                    "characters or give the right file.") from None
    except RecursionError:
        raise error(f"{filename}: nested too deeply to read (over {MAX_DEPTH} levels is never "
                    "a valid file of ours)") from None


class _Budget:
    __slots__ = ("aliased", "error", "filename", "loader", "seen", "values")

    def __init__(self, filename: str, error: type[UserError]) -> None:
        self.filename = filename
        self.error = error
        self.values = 0
        self.aliased = 0
        self.seen: set[int] = set()
        self.loader = yaml.SafeLoader("")


def build_yaml(root: yaml.Node, filename: str, *, lines: dict[Path, int] | None = None,
               error: type[UserError] = InputError) -> Any:
    """Plain data from a node tree, within the value, alias and depth budgets. Keys must be
    text; a repeated key is an error. `lines` (if given) gets the line of every key path."""
    budget = _Budget(filename, error)
    return _build(root, (), lines, budget, False)


def _fail(budget: _Budget, node: yaml.Node, message: str) -> Exception:
    return budget.error(f"{budget.filename}:{node.start_mark.line + 1}: {message}")


def _build(node: yaml.Node, path: Path, lines: dict[Path, int] | None, budget: _Budget,
           aliased: bool) -> Any:
    if len(path) > MAX_DEPTH:
        raise _fail(budget, node, f"nested more than {MAX_DEPTH} levels deep; no file of ours "
                    "nests like that. Check the indentation.")
    aliased = aliased or id(node) in budget.seen
    budget.seen.add(id(node))
    budget.values += 1
    budget.aliased += aliased
    if budget.aliased > MAX_ALIAS_VALUES:
        raise _fail(budget, node, f"aliases (*name) expand to over {MAX_ALIAS_VALUES} values; "
                    "write the values out or use fewer aliases")
    if budget.values > MAX_YAML_VALUES:
        raise _fail(budget, node, f"over {MAX_YAML_VALUES} values; split the file")
    if lines is not None:
        lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        return _mapping(node, path, lines, budget, aliased)
    if isinstance(node, yaml.SequenceNode):
        return [_build(item, (*path, i), lines, budget, aliased)
                for i, item in enumerate(node.value)]
    return _scalar(node, budget)


def _mapping(node: yaml.MappingNode, path: Path, lines: dict[Path, int] | None,
             budget: _Budget, aliased: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key_node, value_node in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise _fail(budget, key_node, "merge keys (<<) are not supported; write the keys out")
        if not isinstance(key_node, yaml.ScalarNode):
            raise _fail(budget, key_node, "a key must be a plain name, not a list or mapping")
        key = _scalar(key_node, budget)
        if not isinstance(key, str):
            raise _fail(budget, key_node, f"key {key!r} is not a name; keys are words "
                        "(quote it if it must be a number)")
        if key in out:
            raise _fail(budget, key_node, f"key {key!r} appears twice in the same mapping; "
                        "keep one")
        out[key] = _build(value_node, (*path, key), lines, budget, aliased)
        if lines is not None:
            lines[(*path, key)] = key_node.start_mark.line + 1
    return out


def _scalar(node: yaml.Node, budget: _Budget) -> Any:
    try:
        return budget.loader.construct_object(node, deep=True)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or err
        raise _fail(budget, node, f"cannot read this value ({problem})") from None


def load_yaml_data(text: str, filename: str, *,
                   error: type[UserError] = InputError) -> Any:
    """Plain data of a YAML (or JSON, a YAML subset) text, within all the budgets."""
    root = compose_yaml(text, filename, error=error)
    return None if root is None else build_yaml(root, filename, error=error)


def load_json(text: str, filename: str, *, error: type[UserError] = InputError) -> Any:
    """Plain data of a JSON text: syntax errors name the line; NaN/Infinity (not JSON) and
    nesting past the depth budget are errors."""
    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    try:
        data = json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as err:
        raise error(f"{filename}:{err.lineno}: not valid JSON ({err.msg}); fix the file or "
                    "write it again") from None
    except ValueError as err:
        raise error(f"{filename}: {err}; write null or a number") from None
    except RecursionError:
        raise error(f"{filename}: nested too deeply to read") from None
    if _depth(data) > MAX_DEPTH:
        raise error(f"{filename}: nested more than {MAX_DEPTH} levels deep; no file of ours "
                    "nests like that")
    return data


def _depth(data: Any) -> int:
    best, stack = 0, [(data, 0)]
    while stack:
        value, d = stack.pop()
        best = max(best, d)
        if best > MAX_DEPTH:
            break
        if isinstance(value, dict):
            stack.extend((v, d + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, d + 1) for v in value)
    return best


# ------------------------------------------------------------------------ operator text
MAX_OPERATOR_TEXT = 500  # a drain reason, as the server's request body allows


class OperatorTextError(UserError):
    """Free text from the operator (a reason) that cannot be stored and shown as written."""


# Characters that change how the text around them reads without being seen: bidirectional
# overrides, embeddings and isolates (U+202E makes "exe.txt" read "txt.exe"), zero-width
# spaces and joiners, the word joiner and invisible operators, the byte-order mark. Like
# ESC and OSC, they never reach a reader's terminal or page as themselves.
INVISIBLE = frozenset((0x061C, *range(0x200B, 0x2010), *range(0x202A, 0x202F),
                       *range(0x2060, 0x2065), *range(0x2066, 0x206A), 0xFEFF))


# Every character no reader may get as itself: C0 but tab, DEL, C1, and the INVISIBLE ones.
HIDDEN = frozenset((*(o for o in range(0x20) if o != 0x09), *range(0x7F, 0xA0), *INVISIBLE))


def escape_of(c: str) -> str:
    """How a hidden character is shown: `\\xNN` (a control character), `\\uNNNN` (bidi,
    zero-width)."""
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def control_characters(text: str) -> list[str]:
    """The hidden characters of `text` (C0 but tab, DEL, C1, and the INVISIBLE ones), as
    escapes, in order."""
    return [escape_of(c) for c in text if ord(c) in HIDDEN]


# str.translate table: every hidden character as its escape, but newline (it lays text out).
SHOWN = {o: escape_of(chr(o)) for o in HIDDEN if o != 0x0A}


def shown(text: str) -> str:
    """`text` with every hidden character written as its escape: what a terminal line or a
    page may carry of text from a store, a file or a peer."""
    return text.translate(SHOWN)


def check_operator_text(text: str, what: str = "--reason") -> str:
    """`text` stripped, refused when empty, over MAX_OPERATOR_TEXT characters, or holding a
    control character: a NUL is refused by PostgreSQL, an ESC or OSC sequence would drive the
    terminal of whoever reads the history, and a newline would break its one-line rows."""
    bad = control_characters(text)
    if bad:
        shown = ", ".join(dict.fromkeys(bad))
        raise OperatorTextError(f"{what}: control characters ({shown}) are not accepted in "
                                "operator text; write the reason as plain printable text on "
                                "one line")
    text = text.strip()
    if not text:
        raise OperatorTextError(f"{what}: give a non-empty text")
    if len(text) > MAX_OPERATOR_TEXT:
        raise OperatorTextError(f"{what}: {len(text)} characters; at most "
                                f"{MAX_OPERATOR_TEXT}")
    return text
