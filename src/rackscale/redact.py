"""The one redaction of secrets in text: every printer, report, bundle and API answer uses it.

What is masked (replaced by `***`):

- the password of a URL's userinfo (`scheme://user:PASSWORD@host`). The authority is split at
  its LAST `@`, as urllib does, so a password holding `@` (`ops:S3c@ret@db`) is masked whole;
- the value of a query or `key=value` parameter whose name says it is a secret (`password`,
  `token`, `secret_key`, `sslpassword`, ...; any case), in a URL or a libpq DSN;
- the value of an `Authorization` header echoed in text (a BMC's error body), and any
  `Basic TOKEN` / `Bearer TOKEN` credential; a Basic token is also decoded and the decoded
  `user:password` (and the password alone) is masked wherever else the text repeats it;
- any literal secret the caller knows (`secrets=`: the BMC password, a URL's password) that a
  driver may echo in its own words.

This module imports nothing of rackscale, so every room may use it (like `errors`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import urllib.parse
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Parameter names whose value is a credential. Matched whole (so `sort_key` is not `key`);
# not `pass`, which counts verdicts (`pass=12 fail=0`) in summaries.
SECRET_PARAMS = frozenset({
    "password", "passwd", "pwd", "secret", "token", "key", "access_key", "secret_key",
    "sslpassword", "access_token", "api_key", "apikey", "client_secret",
    "aws_secret_access_key", "aws_session_token", "x-amz-security-token", "x-amz-signature",
})
# A literal secret shorter than this is not masked by value: replacing "pw" everywhere would
# garble every message, and a secret that short is guessed anyway.
MIN_LITERAL = 4

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_PARAM = re.compile(r"(?<![A-Za-z0-9_-])(" + "|".join(re.escape(p) for p in
                    sorted(SECRET_PARAMS, key=len, reverse=True)) +
                    r")(\s*=\s*)(['\"]?)([^&\s'\";#,)}]+)", re.IGNORECASE)
# `Authorization: Basic xyz`, `"Authorization": "Bearer xyz"`, `authorization=xyz`
_AUTH_HEADER = re.compile(r"((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)"
                          r"(?:([A-Za-z]+)\s+)?([^\s'\",}]+)", re.IGNORECASE)
_BASIC = re.compile(r"\b(Basic)\s+([A-Za-z0-9+/]{4,}={0,2})", re.IGNORECASE)
# A Bearer token: long and not a plain word, so "Bearer authentication" stays readable.
_BEARER = re.compile(r"\b(Bearer)\s+(?=[A-Za-z0-9._~+/=-]*[0-9._~+/=-])([A-Za-z0-9._~+/=-]{8,})",
                     re.IGNORECASE)


def _decoded_basic(token: str) -> str | None:
    """The `user:password` of a Basic token, or None when it is not one."""
    try:
        text = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return text if ":" in text and text.isprintable() else None


def _split_authority(netloc: str) -> tuple[str, str | None, str]:
    """(user, password or None, host) of an authority, split at its last `@`."""
    userinfo, sep, host = netloc.rpartition("@")
    if not sep:
        return "", None, netloc
    user, colon, password = userinfo.partition(":")
    return user, (password if colon else None), host


def _masked_query(query: str) -> str:
    return _PARAM.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{MASK}", query)


def redact_url(url: str, *, keep_user: bool = True) -> str:
    """`url` with its userinfo password and secret query parameters masked. With
    `keep_user=False` the whole userinfo goes (an S3 endpoint's user is an access key)."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unparseable URL (a bad IPv6 literal): mask what looks secret
        return _masked_query(re.sub(r"(://)[^/?#]*@", rf"\1{MASK}@", url))
    user, password, host = _split_authority(parts.netloc)
    netloc = parts.netloc
    if "@" in netloc:
        if not keep_user:
            netloc = f"{MASK}@{host}"
        elif password is not None:
            netloc = f"{user}:{MASK}@{host}"
    query = _masked_query(parts.query) if parts.query else parts.query
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


def url_secrets(url: str, *, with_user: bool = False) -> list[str]:
    """The secret values in `url` (its password, secret query values; raw and decoded), to
    mask wherever a driver's message repeats them."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return []
    user, password, _ = _split_authority(parts.netloc)
    out = [password] if password else []
    if with_user and user:
        out.append(user)
    out += [m.group(4) for m in _PARAM.finditer(parts.query)]
    return out + [urllib.parse.unquote(s) for s in out]


def redact(text: str, *, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every credential it shows masked (see the module docstring)."""
    known = [s for s in secrets if s and len(s) >= MIN_LITERAL]
    for m in _BASIC.finditer(text):
        pair = _decoded_basic(m.group(2))
        if pair is not None:
            known += [s for s in (pair, pair.partition(":")[2]) if len(s) >= MIN_LITERAL]
    for m in _AUTH_HEADER.finditer(text):
        pair = _decoded_basic(m.group(3))
        if pair is not None:
            known += [s for s in (pair, pair.partition(":")[2]) if len(s) >= MIN_LITERAL]
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + (f"{m.group(2)} " if m.group(2) else "")
                            + MASK, text)
    text = _BASIC.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _masked_query(text)
    # longest first, so a secret that contains another is masked whole
    for secret in sorted(set(known), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def redact_obj(obj: Any, *, secrets: Iterable[str | None] = ()) -> Any:
    """Every string of a JSON-like value (keys included) redacted."""
    known = list(secrets)
    if isinstance(obj, str):
        return redact(obj, secrets=known)
    if isinstance(obj, dict):
        return {redact_obj(k, secrets=known): redact_obj(v, secrets=known)
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(v, secrets=known) for v in obj]
    return obj


class RedactingFormatter(logging.Formatter):
    """A log formatter whose whole output (message, arguments and traceback) goes through
    `redact`: a traceback quotes the values it failed on, a database URL with its password or
    a request's Authorization header among them, and a server log is read by more people than
    the credentials are meant for."""

    def __init__(self, inner: logging.Formatter | None = None, *,
                 secrets: Iterable[str | None] = ()) -> None:
        super().__init__()
        self.inner = inner or logging.Formatter("%(levelname)s %(name)s: %(message)s")
        self.secrets = tuple(s for s in secrets if s)

    def format(self, record: logging.LogRecord) -> str:
        return redact(self.inner.format(record), secrets=self.secrets)


def redact_logs(loggers: Iterable[str], *, secrets: Iterable[str | None] = ()) -> None:
    """Every handler of `loggers` (and of the root logger) writes through `RedactingFormatter`.
    A named logger with no handler of its own gets one to stderr (and stops propagating, so a
    record is written once), so its records do not fall through to `logging.lastResort`, which
    no formatter reaches."""
    known = tuple(s for s in secrets if s)
    for name in ("", *loggers):
        logger = logging.getLogger(name)
        if name and not logger.handlers:
            logger.addHandler(logging.StreamHandler())
            logger.propagate = False
        for handler in logger.handlers:
            inner = handler.formatter
            if isinstance(inner, RedactingFormatter):
                inner = inner.inner
            handler.setFormatter(RedactingFormatter(inner, secrets=known))
