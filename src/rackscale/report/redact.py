"""Redaction: publish a statement without revealing the floor plan.

Region names and rack names are replaced by keyed pseudonyms (HMAC-SHA256 with the operator's
secret key, so they are stable across runs with one key, differ with another, and cannot be
reversed without the key): `us-east/r03/c07/gpu2` becomes `rg-1a2b3c4d5e/rk-6f7a8b9c0d/c07/gpu2`.
The redacted fleet spec names its racks by pseudonym and, inside each run of racks that share
a template and a leaf switch, orders them by pseudonym, so a rack's place in the listing says
nothing beyond its leaf group. Everything the ledger depends on (templates, NVLink domains,
leaf groups, blast radii) is unchanged, so the redacted bundle's ledger has the same counts
and the bundle verifies on its own. Positions inside a rack (c07, gpu2) are the same in every
rack of a template and are kept. Every string in the evidence (ids, event reasons, evidence
notes, Slurm node names) goes through the same mapping; the store URL is dropped.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.fleet import FleetSpec
from rackscale.report.bundle import (
    EVIDENCE_DIR,
    RECOVERY_FILE,
    VIEW_FILES,
    canonical,
    decode,
    events_in,
    extras_of,
    read_evidence,
    view_from_evidence,
)
from rackscale.report.page import render_html
from rackscale.report.statement import document_of, load_report, write_statement

MIN_KEY_BYTES = 16


class RedactError(UserError):
    pass


def load_redaction_key(path: Path) -> bytes:
    if not path.is_file():
        raise RedactError(f"{path}: no such key file; make one with `rackscale report keygen "
                          "--redaction --key FILE`")
    key = path.read_bytes().strip()
    if len(key) < MIN_KEY_BYTES:
        raise RedactError(f"{path}: a redaction key needs at least {MIN_KEY_BYTES} bytes of "
                          f"secret, found {len(key)}")
    return key


def write_redaction_key(path: Path, *, force: bool = False) -> Path:
    """A new random redaction secret (32 bytes, hex) in `path`, mode 0600."""
    if path.exists() and not force:
        raise RedactError(f"{path} exists; choose another --key or pass --force to replace it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
        os.chmod(path, 0o600)
    except OSError as err:
        raise RedactError(f"--key {path}: cannot write the redaction key there "
                          f"({err.strerror or err}); give a path in a directory you can "
                          "write to") from None
    return path


def pseudonym(key: bytes, kind: str, name: str) -> str:
    digest = hmac.new(key, f"{kind}\0{name}".encode(), hashlib.sha256).hexdigest()
    return f"{kind}-{digest[:10]}"


class Pseudonyms:
    """The keyed mapping of one fleet's region and rack names, and the redacted spec."""

    def __init__(self, spec: FleetSpec, key: bytes) -> None:
        self.regions = {r.name: pseudonym(key, "rg", r.name) for r in spec.regions}
        self.racks: dict[tuple[str, str], str] = {}
        per_leaf = spec.network.racks_per_leaf
        raw = spec.model_dump(mode="json")
        for region, rdict in zip(spec.regions, raw["regions"], strict=True):
            rdict["name"] = self.regions[region.name]
            listing = region.rack_names()
            for group, gdict in zip(region.racks, rdict["racks"], strict=True):
                local = [(i, name) for i, (name, g) in enumerate(listing) if g is group]
                names = []
                for block in sorted({i // per_leaf for i, _ in local}):
                    real = [n for i, n in local if i // per_leaf == block]
                    fake = [pseudonym(key, "rk", f"{region.name}/{n}") for n in real]
                    self.racks.update({(region.name, n): f for n, f in zip(real, fake,
                                                                           strict=True)})
                    names += sorted(fake)
                gdict["names"], gdict["count"] = names, None
        self.spec = FleetSpec.model_validate(raw)
        alternatives = "|".join(re.escape(r) for r in sorted(self.regions, key=len,
                                                              reverse=True))
        # a region name, optionally followed by "/rest" or "-rest" (a Slurm node name)
        self._pattern = re.compile(rf"(?<![A-Za-z0-9_.-])({alternatives})(?![a-z0-9])"
                                   r"(?:([/-])([a-z0-9][a-z0-9-]*))?")

    def _sub(self, m: re.Match[str]) -> str:
        region, sep, tail = m.group(1), m.group(2), m.group(3)
        out = self.regions[region]
        if tail is None:
            return out
        # the longest hyphen-prefix of the tail that is a rack of the region ("r03" of
        # "r03-c07", a rack named "row-a" of "row-a-c07")
        cut = len(tail)
        while cut > 0:
            fake = self.racks.get((region, tail[:cut]))
            if fake:
                return f"{out}{sep}{fake}{tail[cut:]}"
            cut = tail.rfind("-", 0, cut)
        return f"{out}{sep}{tail}"

    def text(self, s: str) -> str:
        return self._pattern.sub(self._sub, s)

    def walk(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, dict):
            return {self.text(k): self.walk(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.walk(v) for v in obj]
        return obj


def _redact_file(name: str, data: bytes, p: Pseudonyms,
                 walk: Callable[[Any], Any]) -> bytes:
    if name.endswith(".jsonl"):
        return b"".join(canonical(walk(decode(line, f"evidence/{name}"))) + b"\n"
                        for line in data.splitlines() if line)
    value = decode(data, f"evidence/{name}")
    if name == "fleet.json":
        value = {"spec": p.spec.model_dump(mode="json")}
    else:
        value = walk(value)
        if name == "meta.json":
            value["view"]["store_url"] = "redacted"
    return canonical(value) + b"\n"


def redact_bundle(src: Path, dst: Path, key: bytes) -> dict[str, Any]:
    """Write the redacted statement of the bundle in `src` to `dst` (unsigned: sign it with
    `rackscale report sign`). The source must pass its own hash checks first."""
    if dst.resolve() == src.resolve():
        raise RedactError(f"{dst}: the redacted bundle needs a directory of its own")
    doc = load_report(src)
    evidence = read_evidence(src)
    if evidence.problems:
        raise RedactError(f"{src}: the evidence fails its hashes, so it is not redacted: "
                          + "; ".join(evidence.problems))
    view, _ = view_from_evidence(evidence.files)
    p = Pseudonyms(view.topo.spec, key)
    files = {n: _redact_file(n, d, p, p.walk) for n, d in evidence.files.items()}
    rview, rparams = view_from_evidence(files)
    when = datetime.fromisoformat(doc["generated_at"]) if doc.get("generated_at") else None
    # the recovery and soak sections from the redacted recovery events, as verify recomputes
    # them (without them the redacted report said not_run and failed its own verification)
    rdoc, _ = document_of(rview, rparams, generated_at=when,
                          recovery=extras_of(files).get(RECOVERY_FILE))
    if dst.exists():
        shutil.rmtree(dst / EVIDENCE_DIR, ignore_errors=True)
    dst.mkdir(parents=True, exist_ok=True)
    extra = {n[:-5]: json.loads(d) for n, d in files.items() if n not in VIEW_FILES
             and n.endswith(".json")}
    extra_events = {n: events_in(files, n) for n in files if n not in VIEW_FILES
                    and n.endswith(".jsonl")}
    write_statement(dst, rview, rdoc, rparams, extra=extra, extra_events=extra_events)
    rdoc["build_s"] = doc.get("build_s")
    write_atomic(dst / "report.json", json.dumps(rdoc, indent=2, default=str,
                                                 allow_nan=False) + "\n")
    write_atomic(dst / "report.html", render_html(rdoc))
    return rdoc

