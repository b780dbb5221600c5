"""Verify a report bundle: the signature, every hash, then the ledger recomputed from the
evidence with the same rules the report used.

Checks run in order and all of them run (a buyer wants every problem, not the first one
only); the verdict names the first that failed. Bad input (no such directory, no report.json
or manifest, an unusable public key) raises a UserError instead: exit 2, not 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rackscale.report.bundle import BundleError, decode, read_evidence, read_file, sha256
from rackscale.report.sign import SIGNED_FILES, load_public, read_signature, signature_valid
from rackscale.report.statement import first_difference, ledger_difference, load_report, recompute

PAGE_FILE = "report.html"


@dataclass(slots=True, kw_only=True)
class Check:
    """One check's outcome: `ok` (it ran and passed), `fail`, or `skip` (it could not run; the
    detail says why). A skip fails nothing, but it vouches for nothing either: it is not ok."""

    name: str
    status: Literal["ok", "fail", "skip"]
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def as_dict(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "ok": self.ok,
                "detail": self.detail}


@dataclass(slots=True, kw_only=True)
class Verification:
    bundle: str
    root: str | None
    key_id: str | None
    checks: list[Check] = field(default_factory=list)
    evidence_files: int = 0

    @property
    def covered(self) -> list[str]:
        """What a pass vouches for. report.html is not in it: the page is rendered from
        report.json and re-rendered by `verify --update-html`, so no signature can cover it;
        a verdict that named only the directory let a forged page pass as verified."""
        return [*SIGNED_FILES, f"evidence/ ({self.evidence_files} files)"]

    @property
    def ok(self) -> bool:
        """Verified: checks ran and none failed (a skipped one is said, not failed)."""
        return bool(self.checks) and not any(c.failed for c in self.checks)

    @property
    def first_problem(self) -> str | None:
        return next((f"{c.name}: {c.detail}" for c in self.checks if c.failed), None)

    def add(self, name: str, problem: str | None, ok_text: str) -> None:
        self.checks.append(Check(name=name, status="ok" if problem is None else "fail",
                                 detail=problem or ok_text))

    def skip(self, name: str, why: str) -> None:
        """A check that could not run here: `not checked (why)`."""
        self.checks.append(Check(name=name, status="skip", detail=f"not checked ({why})"))

    def as_dict(self) -> dict[str, Any]:
        return {"verified": self.ok, "bundle": self.bundle, "evidence_root": self.root,
                "covered": self.covered, "not_covered": [PAGE_FILE],
                "key_id": self.key_id, "first_problem": self.first_problem,
                "checks": [c.as_dict() for c in self.checks]}


def _signature(v: Verification, out: Path, pub: Any, root: str) -> None:
    sig = read_signature(out)
    if sig is None:
        v.add("signature", "signature.json: missing (the bundle is not signed; sign it with "
              "`rackscale report sign DIR --key FILE`)", "")
        return
    if isinstance(sig, str):
        v.add("signature", sig, "")
        return
    v.key_id = sig.get("key_id")
    v.add("signature", signature_valid(sig, pub), f"valid Ed25519 signature by {v.key_id}")
    statement = st if isinstance(st := sig.get("statement"), dict) else {}
    signed_root = statement.get("evidence_root")
    v.add("signed bundle", None if signed_root == root else
          f"signature.json signs evidence {signed_root}, but this bundle's evidence/manifest.json "
          f"hashes to {root}: a signature of another bundle, or evidence of another run",
          "the signature covers this bundle's evidence root")
    signed = fs if isinstance(fs := statement.get("files"), dict) else {}
    for name in SIGNED_FILES:
        path = out / name
        if not path.is_file() and not path.is_symlink():
            v.add(name, f"{name}: missing (the signature covers it)", "")
            continue
        got = sha256(read_file(path, name))
        v.add(name, None if got == signed.get(name) else
              f"{name}: sha256 {got[:16]}... is not the signed {str(signed.get(name))[:16]}... "
              "(the file was changed after signing)", "matches the signed hash")


def _roots(v: Verification, doc: dict[str, Any], root: str) -> None:
    ev = doc.get("evidence")
    named = ev.get("root") if isinstance(ev, dict) else None
    v.add("evidence root", None if named == root else
          f"report.json names evidence {named}, but evidence/manifest.json hashes to {root} "
          "(the evidence is of another run, or the manifest was changed)",
          f"report.json and the manifest both name {root}")


def verify_bundle(out: Path, pubkey: Path) -> Verification:
    doc = load_report(out)
    pub = load_public(pubkey)
    evidence = read_evidence(out)
    v = Verification(bundle=str(out), root=evidence.root, key_id=None,
                     evidence_files=len(evidence.files))
    _signature(v, out, pub, evidence.root)
    _roots(v, doc, evidence.root)
    v.add("evidence hashes", "; ".join(evidence.problems) or None,
          f"{len(evidence.files)} files match the manifest")
    if evidence.problems:
        v.add("recompute", "not recomputed: the evidence fails its hashes", "")
        return v
    try:
        recomputed, disclosure = recompute(evidence.files, doc.get("generated_at"))
    except BundleError as err:
        v.add("recompute", f"the evidence cannot be read: {err}", "")
        return v
    v.add("recompute", ledger_difference(doc, recomputed),
          f"every figure of report.json agrees with the ledger recomputed from the evidence "
          f"({len(recomputed['ledger'])} steps, {len(recomputed['racks'])} racks, "
          f"{len(recomputed['findings'])} findings)")
    _disclosure(v, out, disclosure)
    return v


def _disclosure(v: Verification, out: Path, recomputed: dict[str, Any]) -> None:
    path = out / "disclosure.json"
    if not path.is_file() and not path.is_symlink():
        return  # named by the signature check already
    data = read_file(path, "disclosure.json")
    try:
        got = decode(data, "disclosure.json")
    except BundleError as err:
        v.add("disclosure", str(err), "")
        return
    found = first_difference(got, recomputed)
    v.add("disclosure", None if found is None else
          f"disclosure.json {found[0]}: says {found[1]!r}, the evidence gives {found[2]!r}",
          "agrees with the evidence")
    try:
        import jsonschema
    except ImportError:  # a test extra: without it the schema check is skipped, and said so
        v.skip("disclosure schema", "jsonschema is not installed")
        return
    from rackscale.report.disclosure import validate_disclosure

    try:
        validate_disclosure(got)
    except jsonschema.ValidationError as err:
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        v.add("disclosure schema", f"disclosure.json {where}: {err.message}", "")
        return
    v.add("disclosure schema", None, "matches rackscale.disclosure/1")
