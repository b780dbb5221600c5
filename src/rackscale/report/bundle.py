"""The evidence bundle: everything the ledger is computed from, content-addressed.

A report directory holds `report.json` and, under `evidence/`, one file per piece of raw
evidence: one per field of the StoreView the ledger reads (the fleet spec, the inventory, the
lifecycle events and latest states, the certification run with its findings and results, the
simulation run and sweep), measured checkpoint and recovery figures where they exist, and
`manifest.json`: the sha256 of every file, sorted by path. The bundle's
root hash is the sha256 of the manifest's canonical bytes; `report.json` names the bundle by
it. Files are canonical JSON (sorted keys, no spaces, UTF-8), events one per line in seq order,
so the same evidence always gives the same bytes and the same root.

`view_from_evidence` turns the files back into the `StoreView` the ledger reads, so a verifier
runs the very ledger code the report ran, from the bundle alone, without the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.fleet import FleetSpec, Topology
from rackscale.report.storeview import StoreView
from rackscale.store import Event, loads_tagged, tag_nonfinite

EVIDENCE_FORMAT = "rackscale.evidence/1"
EVIDENCE_DIR = "evidence"
MANIFEST = "manifest.json"
# Event kinds that carry measured recovery and checkpoint figures, exported when the store has
# them (the ledger does not read them; the recovery and soak sections and the disclosure do:
# `recovery.incident` and `recovery.soak` both land in this file).
RECOVERY_FILE = "recovery.jsonl"
# (A "checkpoint." prefix stood here and matched no event kind: checkpoints keep their own
# manifests and journal, not store events, so that file was always empty.)
EXTRA_EVENT_PREFIXES = {RECOVERY_FILE: ("recovery.",)}
# What a verifier reads of one bundle file, at most: the largest real file (100k events) is a
# few tens of MiB; a bigger one is refused before it is read, so a hostile bundle cannot make
# `verify` hold gigabytes.
MAX_FILE_BYTES = 256 << 20
# JSON nesting a bundle file may have: real files nest under 12 deep; a deeper one would
# overflow the recursion of the comparison and the hashing (a RecursionError, not a message).
MAX_DEPTH = 64
# events_in builds Events positionally (the fast path at 100k+ events): the field order is
# checked once here, so a change in the store's Event fails at import, not silently.
_EVENT_FIELDS = ("seq", "time", "component_id", "kind", "payload", "actor", "reason")
if tuple(f.name for f in dataclasses.fields(Event) if f.init) != _EVENT_FIELDS:
    raise RuntimeError(f"rackscale.store.Event fields changed; report/bundle.py expects "
                       f"{_EVENT_FIELDS}")


class BundleError(UserError):
    """The directory is not a readable evidence bundle (exit 2)."""


# ------------------------------------------------------------------ canonical JSON
def canonical(obj: Any) -> bytes:
    """The one byte form of a JSON value that every hash in a bundle is taken over."""
    try:
        text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except ValueError:
        text = json.dumps(tag_nonfinite(obj), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8")


def decode(data: bytes, where: str) -> Any:
    try:
        value = loads_tagged(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise BundleError(f"{where}: not valid JSON ({err})") from None
    except RecursionError:
        raise BundleError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels); "
                          "not a rackscale bundle file") from None
    if type(value) in (dict, list) and _depth(value) > MAX_DEPTH:
        raise BundleError(f"{where}: JSON nested too deeply (more than {MAX_DEPTH} levels); "
                          "not a rackscale bundle file")
    return value


def _depth(value: Any) -> int:
    """How deep `value` nests, counted up to MAX_DEPTH + 1: level by level, iteratively (the
    check must not overflow what it guards) and with the walking in C (`extend`), as it runs
    over every file a verifier reads."""
    level, depth = [value], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            break
        below: list[Any] = []
        for v in level:
            below.extend(v.values() if type(v) is dict else v)
        level = [v for v in below if type(v) is dict or type(v) is list]
    return depth


def read_file(path: Path, where: str | None = None) -> bytes:
    """The bytes of one bundle file: a regular file, not a symbolic link (a link could point
    out of the bundle, so a verifier would check bytes that are not the bundle's), at most
    MAX_FILE_BYTES, read with that bound."""
    name = where or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise BundleError(f"{name}: missing") from None
    except OSError as err:
        if path.is_symlink():
            raise BundleError(f"{name}: a symbolic link; a bundle holds plain files only, "
                              "copy the file in instead") from None
        raise BundleError(f"{name}: cannot be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{name}: not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise BundleError(f"{name}: {st.st_size} bytes, over the {MAX_FILE_BYTES >> 20} MiB "
                              "a bundle file may have; not read")
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:  # it grew while being read
        raise BundleError(f"{name}: over the {MAX_FILE_BYTES >> 20} MiB a bundle file may "
                          "have; not read")
    return data


def plain_dir(path: Path, where: str) -> None:
    """Refuse a directory of the bundle that is a symbolic link (it could lead anywhere)."""
    if path.is_symlink():
        raise BundleError(f"{where}: a symbolic link; a bundle's directories are its own, "
                          "copy them in instead")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ pieces
def _event_line(ev: Event) -> bytes:
    return canonical(ev.as_dict())


def _events_file(events: list[Event]) -> bytes:
    return b"".join(_event_line(e) + b"\n" for e in sorted(events, key=lambda e: e.seq))


def _one(ev: Event | None) -> bytes:
    return canonical(None if ev is None else ev.as_dict()) + b"\n"


def event_from(d: Any, where: str) -> Event:
    try:
        return Event.from_dict(d)
    except ValueError as err:
        raise BundleError(f"{where}: {err}") from None


def _field_kinds() -> dict[str, str]:
    """How each StoreView field is kept in the bundle, from its type: the bundle follows the
    view (a field the report learns to read is exported and restored without a change here)."""
    kinds = {}
    for name, tp in typing.get_type_hints(StoreView).items():
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is Topology:
            kinds[name] = "topology"
        elif tp == (Event | None):
            kinds[name] = "event"
        elif origin is list and args == (Event,):
            kinds[name] = "events"
        elif origin is dict and args == (str, Event):
            kinds[name] = "event_map"  # keyed by the event's component id
        elif origin is set:
            kinds[name] = "set"
        else:
            kinds[name] = "plain"  # str, int, dict of JSON values: kept in meta.json
    return kinds


FIELD_KINDS = _field_kinds()


def field_file(name: str) -> str:
    kind = FIELD_KINDS[name]
    if kind == "topology":
        return "fleet.json"
    stem = name.replace("_", "-")
    return f"{stem}.jsonl" if kind in ("events", "event_map") else f"{stem}.json"


VIEW_FILES = frozenset({"meta.json"} | {field_file(n) for n, k in FIELD_KINDS.items()
                                        if k != "plain"})


def evidence_files(view: StoreView, params: dict[str, Any],
                   extra: dict[str, Any] | None = None,
                   extra_events: dict[str, list[Event]] | None = None) -> dict[str, bytes]:
    """The bundle's evidence pieces (path -> bytes) for one read of the store: one file per
    field of the StoreView the ledger reads.

    `params` are the report's own inputs (job shape, GPU-hour price); `extra` are measured
    figures that live outside the store (the demo's checkpoint save/restore), one file each.
    """
    plain: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    for name, kind in FIELD_KINDS.items():
        value = getattr(view, name)
        if kind == "plain":
            plain[name] = value
        elif kind == "topology":
            files[field_file(name)] = canonical({"spec": value.spec.model_dump(mode="json")}) \
                + b"\n"
        elif kind == "event":
            files[field_file(name)] = _one(value)
        elif kind == "events":
            files[field_file(name)] = _events_file(value)
        elif kind == "event_map":
            if any(k != e.component_id for k, e in value.items()):
                raise ValueError(f"StoreView.{name}: keys must be the events' component ids")
            files[field_file(name)] = _events_file(list(value.values()))
        else:
            files[field_file(name)] = canonical(sorted(value)) + b"\n"
    files["meta.json"] = canonical({"format": EVIDENCE_FORMAT, "params": params,
                                    "view": plain}) + b"\n"
    for name, events in (extra_events or {}).items():
        if events:
            files[name] = _events_file(events)
    for name, value in (extra or {}).items():
        files[f"{name}.json"] = canonical(value) + b"\n"
    return files


# ------------------------------------------------------------------ manifest
def manifest_of(files: dict[str, bytes]) -> dict[str, Any]:
    return {"format": EVIDENCE_FORMAT,
            "files": [{"path": p, "sha256": sha256(files[p]), "bytes": len(files[p])}
                      for p in sorted(files)]}


def root_of(manifest: dict[str, Any]) -> str:
    """The bundle's name: sha256 of the manifest's canonical bytes."""
    return "sha256:" + sha256(canonical(manifest))


def write_evidence(out: Path, files: dict[str, bytes]) -> str:
    """Write the pieces and their manifest under out/evidence/; return the root hash."""
    edir = out / EVIDENCE_DIR
    edir.mkdir(parents=True, exist_ok=True)
    for stale in edir.iterdir():  # a rebuild must not leave another run's pieces behind
        if stale.is_file() and stale.name != MANIFEST and stale.name not in files:
            stale.unlink()
    for path, data in files.items():
        write_atomic(edir / path, data, sync=False)
    manifest = manifest_of(files)
    write_atomic(edir / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return root_of(manifest)


@dataclass(slots=True, kw_only=True)
class EvidenceCheck:
    """What reading a bundle's evidence found: the files whose bytes match the manifest, and
    every problem, each naming its file."""

    manifest: dict[str, Any]
    root: str
    files: dict[str, bytes] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_evidence(out: Path) -> EvidenceCheck:
    """Read out/evidence/ against its manifest. A missing manifest is bad input (BundleError);
    a missing, changed or unlisted file is a problem the check names."""
    edir = out / EVIDENCE_DIR
    mpath = edir / MANIFEST
    plain_dir(edir, f"{out}/{EVIDENCE_DIR}")
    if not mpath.is_file() and not mpath.is_symlink():
        raise BundleError(f"{mpath}: no evidence manifest; {out} is not a report bundle "
                          "(build one with `rackscale report build --out DIR`)")
    manifest = decode(read_file(mpath), str(mpath))
    rows = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(rows, list) or not all(
            isinstance(r, dict) and isinstance(r.get("path"), str)
            and isinstance(r.get("sha256"), str) for r in rows):
        raise BundleError(f"{mpath}: files must be a list of {{path, sha256, bytes}}")
    check = EvidenceCheck(manifest=manifest, root=root_of(manifest))
    listed = {r["path"] for r in rows}
    for r in rows:
        path = edir / r["path"]
        if Path(r["path"]).name != r["path"]:
            check.problems.append(f"evidence/{r['path']}: a manifest path must be a plain "
                                  "file name")
            continue
        if not path.is_file() and not path.is_symlink():
            check.problems.append(f"evidence/{r['path']}: missing (the manifest lists it)")
            continue
        data = read_file(path, f"evidence/{r['path']}")
        got = sha256(data)
        if got != r["sha256"]:
            check.problems.append(f"evidence/{r['path']}: sha256 {got[:16]}... differs from the "
                                  f"manifest's {r['sha256'][:16]}... (the file was changed)")
            continue
        check.files[r["path"]] = data
    for path in sorted(edir.iterdir()):
        if path.name != MANIFEST and path.name not in listed and not path.name.startswith("."):
            check.problems.append(f"evidence/{path.name}: not in the manifest")
    return check


# ------------------------------------------------------------------ back to a StoreView
def events_in(files: dict[str, bytes], name: str) -> list[Event]:
    data = files.get(name, b"")
    lines = [x for x in data.splitlines() if x]
    try:
        # One parse of the whole file (a JSON array of its lines) is several times faster
        # than a parse per line at 100k+ events; a bad line is then found line by line.
        rows = decode(b"[" + b",".join(lines) + b"]", f"evidence/{name}")
    except BundleError:
        for n, line in enumerate(lines, 1):
            decode(line, f"evidence/{name}:{n}")
        raise
    if not isinstance(rows, list) or len(rows) != len(lines):
        raise BundleError(f"evidence/{name}: one JSON event per line expected")
    events = Event.from_dicts(rows)
    if events is not None:
        return events
    # name the first bad line
    return [event_from(d, f"evidence/{name}:{n}") for n, d in enumerate(rows, 1)]


def _need(files: dict[str, bytes], name: str) -> Any:
    if name not in files:
        raise BundleError(f"evidence/{name}: missing; the ledger cannot be recomputed without it")
    return decode(files[name], f"evidence/{name}")


def _restore(files: dict[str, bytes], name: str, kind: str) -> Any:
    path = field_file(name)
    if kind in ("events", "event_map"):
        if path not in files:
            raise BundleError(f"evidence/{path}: missing; the ledger cannot be recomputed "
                              "without it")
        events = events_in(files, path)
        return events if kind == "events" else {e.component_id: e for e in events}
    value = _need(files, path)
    if kind == "topology":
        try:
            return Topology.build(FleetSpec.model_validate(value["spec"]))
        except (KeyError, TypeError, ValueError) as err:
            raise BundleError(f"evidence/{path}: spec does not validate: {err}") from None
    if kind == "event":
        return None if value is None else event_from(value, f"evidence/{path}")
    if not isinstance(value, list):
        raise BundleError(f"evidence/{path}: a list expected")
    return set(value)


def view_from_evidence(files: dict[str, bytes]) -> tuple[StoreView, dict[str, Any]]:
    """The StoreView (and the report's params) the evidence describes, without a store."""
    meta = _need(files, "meta.json")
    plain = meta.get("view") if isinstance(meta, dict) else None
    if not isinstance(plain, dict):
        raise BundleError("evidence/meta.json: no view object")
    kw: dict[str, Any] = {}
    for name, kind in FIELD_KINDS.items():
        if kind == "plain":
            if name not in plain:
                raise BundleError(f"evidence/meta.json: view.{name} missing")
            kw[name] = plain[name]
        else:
            kw[name] = _restore(files, name, kind)
    return StoreView(**kw), dict(meta.get("params") or {})


def extras_of(files: dict[str, bytes]) -> dict[str, Any]:
    """The pieces the ledger does not read (measured checkpoint and recovery figures)."""
    out: dict[str, Any] = {}
    for name in sorted(set(files) - VIEW_FILES):
        if name.endswith(".jsonl"):
            out[name] = [e.as_dict() for e in events_in(files, name)]
        else:
            out[name] = decode(files[name], f"evidence/{name}")
    return out
