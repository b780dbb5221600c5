"""Ed25519 keys and the signed statement of a report bundle.

The statement names what is signed: the evidence root and the sha256 of report.json and
disclosure.json. signature.json holds it, the public key, and the signature over the
statement's canonical bytes. A private key is only ever read from a file (PEM, PKCS#8), which
must not be readable by others; it never appears on a command line.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from rackscale.durable import write_atomic
from rackscale.errors import UserError
from rackscale.report.bundle import BundleError, canonical, decode, read_file, sha256

SIGNATURE_FILE = "signature.json"
SIGNATURE_FORMAT = "rackscale.signature/1"
STATEMENT_FORMAT = "rackscale.statement/1"
SIGNED_FILES = ("report.json", "disclosure.json")


class KeyFileError(UserError):
    """A key file that cannot be used (exit 2)."""


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise KeyFileError("signing needs the cryptography package: pip install cryptography") \
            from None
    return ed25519


def key_id(public_raw: bytes) -> str:
    """A short, stable name of a public key (what the page and verify print)."""
    return "ed25519:" + hashlib.sha256(public_raw).hexdigest()[:16]


def keygen(out: Path, *, force: bool = False) -> tuple[Path, Path, str]:
    """Write a new private key to `out` (mode 0600) and its public key to `out`.pub."""
    from cryptography.hazmat.primitives import serialization as ser

    ed = _crypto()
    pub_path = out.with_name(out.name + ".pub")
    for p in (out, pub_path):
        if p.exists() and not force:
            raise KeyFileError(f"{p} exists; choose another --out or pass --force to replace it")
    key = ed.Ed25519PrivateKey.generate()
    pem = key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8, ser.NoEncryption())
    pub = key.public_key()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # Created 0600 from the start (never world-readable, not even for a moment).
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(pem)
        os.chmod(out, 0o600)
        write_atomic(pub_path, pub.public_bytes(ser.Encoding.PEM,
                                                ser.PublicFormat.SubjectPublicKeyInfo))
    except OSError as err:
        raise KeyFileError(f"--key {out}: cannot write the key pair there "
                           f"({err.strerror or err}); give a path in a directory you can "
                           "write to") from None
    return out, pub_path, key_id(pub.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw))


def load_private(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization as ser

    ed = _crypto()
    if not path.is_file():
        raise KeyFileError(f"{path}: no such key file; make one with `rackscale report keygen "
                        "--key FILE`")
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise KeyFileError(f"{path}: private key is readable by others (mode {mode:o}); run "
                        f"`chmod 600 {path}`")
    try:
        key = ser.load_pem_private_key(path.read_bytes(), password=None)
    except (ValueError, TypeError) as err:
        raise KeyFileError(f"{path}: not an unencrypted PEM private key ({err})") from None
    if not isinstance(key, ed.Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an Ed25519 key; make one with `rackscale report keygen`")
    return key


def load_public(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization as ser

    ed = _crypto()
    if not path.is_file():
        raise KeyFileError(f"{path}: no such public key file (keygen writes it next to the "
                        "private key, as FILE.pub)")
    try:
        key = ser.load_pem_public_key(path.read_bytes())
    except (ValueError, TypeError) as err:
        raise KeyFileError(f"{path}: not a PEM public key ({err})") from None
    if not isinstance(key, ed.Ed25519PublicKey):
        raise KeyFileError(f"{path}: not an Ed25519 public key")
    return key


def public_raw(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization as ser

    raw: bytes = key.public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
    return raw


def statement_of(out: Path, root: str, fleet: str) -> dict[str, Any]:
    files = {}
    for name in SIGNED_FILES:
        path = out / name
        if not path.is_file() and not path.is_symlink():
            raise KeyFileError(f"{path}: missing; build the report first (`rackscale report "
                            "build --out DIR`)")
        files[name] = sha256(read_file(path))
    return {"format": STATEMENT_FORMAT, "fleet": fleet, "evidence_root": root, "files": files}


def sign_bundle(out: Path, key_path: Path) -> dict[str, Any]:
    """Sign the bundle in `out` with the private key in `key_path`; write signature.json."""
    from rackscale.report.statement import load_valid_report

    key = load_private(key_path)
    doc = load_valid_report(out)
    root = (doc.get("evidence") or {}).get("root")
    if not isinstance(root, str):
        raise KeyFileError(f"{out / 'report.json'}: names no evidence bundle (evidence.root); "
                        "rebuild it with `rackscale report build`")
    statement = statement_of(out, root, str(doc["fleet"]["fleet"]))
    raw = public_raw(key.public_key())
    sig = {"format": SIGNATURE_FORMAT, "algorithm": "ed25519",
           "public_key": base64.b64encode(raw).decode(), "key_id": key_id(raw),
           "statement": statement,
           "signature": base64.b64encode(key.sign(canonical(statement))).decode()}
    write_atomic(out / SIGNATURE_FILE, canonical(sig) + b"\n")
    return sig


def read_signature(out: Path) -> dict[str, Any] | str | None:
    """signature.json, None when there is none, or what is wrong with it. A signature that is
    not JSON is a signature that does not verify (exit 1), like one whose bytes were changed:
    the bundle was given, it fails its check. A link or an oversized file is bad input (2)."""
    path = out / SIGNATURE_FILE
    if not path.is_file() and not path.is_symlink():
        return None
    data = read_file(path)
    try:
        sig = decode(data, SIGNATURE_FILE)
    except BundleError as err:
        return f"{err} (a damaged or forged signature)"
    if not isinstance(sig, dict):
        return f"{SIGNATURE_FILE}: not a JSON object (a damaged or forged signature)"
    return sig


def signature_valid(sig: dict[str, Any], pub: Any) -> str | None:
    """None when `sig` is a valid signature of its statement by `pub`, else what is wrong."""
    from cryptography.exceptions import InvalidSignature

    try:
        raw = base64.b64decode(sig["signature"], validate=True)
        statement = sig["statement"]
    except (KeyError, TypeError, ValueError):
        return "signature.json: no signature/statement (or not base64)"
    if sig.get("key_id") != key_id(public_raw(pub)):
        return (f"signature.json: signed by key {sig.get('key_id')}, not by the given public "
                f"key {key_id(public_raw(pub))}")
    try:
        pub.verify(raw, canonical(statement))
    except InvalidSignature:
        return "signature.json: the signature does not match its statement (bad signature)"
    return None
