"""The one redaction of secrets in text: every printer, report, bundle and API answer uses it.

What is masked (replaced by `***`):

- the password of a URL's userinfo (`scheme://user:PASSWORD@host`). The authority is split at
  its LAST `@`, as urllib does, so a password holding `@` (`ops:S3c@ret@db`) is masked whole;
- the value of a query or `key=value` parameter whose name says it is a secret (`password`,
  `token`, `secret_key`, `sslpassword`, ...; any case), in a URL or a libpq DSN;
- the value of a credential header echoed in text (`Authorization`, `Proxy-Authorization`,
  `Cookie`, `X-Api-Key`, `X-Auth-Token`, `X-Amz-Security-Token`, ...: a BMC's error body), and
  any `Basic TOKEN` / `Bearer TOKEN` credential; a Basic token is also decoded and the decoded
  `user:password` (and the password alone) is masked wherever else the text repeats it;
- any literal secret the caller knows (`secrets=`: the BMC password, a URL's password) that a
  driver may echo in its own words.

Every secret found or given is masked in each form a server echoes it back in: as written,
percent-encoded (any mix of `%XX` and plain characters, either hex case, `+` for a space),
JSON-escaped (`\\u0040`, `\\/`), and inside base64 (a base64 word that decodes to text holding
it). Text is also read once percent-decoded, so a header or parameter that arrives encoded
(`Authorization%3A%20Basic%20...`) is found too. A traceback goes through the same function
(`redacted_traceback`): it quotes the values it failed on.

This module imports nothing of rackscale, so every room may use it (like `errors`).
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
import traceback
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
    "x-amz-credential", "signature", "sig", "session_token", "auth_token", "refresh_token",
    "id_token", "private_token", "passphrase", "credential", "credentials", "apitoken",
})
# Header names whose value is a credential (a proxy's, a cookie, an API key).
SECRET_HEADERS = ("proxy-authorization", "authorization", "x-api-key", "api-key",
                  "x-auth-token", "x-amz-security-token", "x-vault-token", "set-cookie",
                  "cookie")
# A literal secret shorter than this is not masked by value: replacing "pw" everywhere would
# garble every message, and a secret that short is guessed anyway.
MIN_LITERAL = 4

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]+")
_PARAM = re.compile(r"(?<![A-Za-z0-9_-])(" + "|".join(re.escape(p) for p in
                    sorted(SECRET_PARAMS, key=len, reverse=True)) +
                    r")(\s*=\s*)(['\"]?)([^&\s'\";#,)}]+)", re.IGNORECASE)
# `Authorization: Basic xyz`, `"Authorization": "Bearer xyz"`, `authorization=xyz`,
# `X-Api-Key: xyz`; a cookie's value runs to the end of the line (`a=1; b=2`).
_AUTH_HEADER = re.compile(r"(?<![A-Za-z0-9_-])((?:" + "|".join(
    re.escape(h) for h in SECRET_HEADERS if not h.endswith("cookie")) +
    r")\\?['\"]?\s*[:=]\s*\\?['\"]?)"
    r"(?:(Basic|Bearer|Digest|Token|Negotiate|AWS4-HMAC-SHA256)\s+)?"
    r"([^\s'\",}\\]+)", re.IGNORECASE)
_COOKIE = re.compile(r"(?<![A-Za-z0-9_-])((?:set-)?cookie\\?['\"]?\s*:\s*\\?['\"]?)"
                     r"([^\r\n'\"}\\]+)", re.IGNORECASE)
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


def _found_secrets(text: str, *, params: bool) -> list[str]:
    """The credentials `text` shows by their context (a header, a Basic token, a URL's
    password; with `params`, a secret parameter's value), as written in it; with the decoded
    `user:password` of a Basic token and its password. A parameter of plain text is masked
    where it stands (`key=...` names many things that are no secret elsewhere in the text);
    `params` is for text that arrived percent-encoded, where it is masked by value."""
    found = []
    for m in _BASIC.finditer(text):
        found.append(m.group(2))
        pair = _decoded_basic(m.group(2))
        if pair is not None:
            found += [pair, pair.partition(":")[2]]
    for m in _AUTH_HEADER.finditer(text):
        found.append(m.group(3))
        pair = _decoded_basic(m.group(3))
        if pair is not None:
            found += [pair, pair.partition(":")[2]]
    found += [m.group(2).strip() for m in _COOKIE.finditer(text)]
    found += [m.group(2) for m in _BEARER.finditer(text)]
    if params:
        found += [m.group(4) for m in _PARAM.finditer(text)]
    for m in _URL.finditer(text):
        found += url_secrets(m.group(0))
    return [s for s in found if len(s) >= MIN_LITERAL and s != MASK]


def _char_forms(ch: str) -> str:
    """A pattern for one character of a secret in each form a server echoes it in: itself,
    percent-encoded (either hex case), `+` for a space, JSON's `\\uXXXX` and `\\/`."""
    forms = [re.escape(ch), "(?i:" + "".join(f"%{b:02x}" for b in ch.encode()) + ")"]
    if ch == " ":
        forms.append(r"\+")
    if ch == "/":
        forms.append(r"\\/")
    if ord(ch) < 0x10000:
        forms.append(rf"(?i:\\u{ord(ch):04x})")
    return "(?:" + "|".join(forms) + ")"


def _encoded(secret: str) -> re.Pattern[str]:
    return re.compile("".join(_char_forms(ch) for ch in secret))


# A base64 word (standard or URL-safe alphabet), long enough to carry a secret; one longer
# than _B64_MAX (an embedded image) is not decoded: it holds no echoed header.
_B64_WORD = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}")
_B64_MAX = 4096


def _b64_text(word: str) -> str | None:
    padded = word + "=" * (-len(word.rstrip("=")) % 4 if "=" not in word else 0)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            return decode(padded.encode()).decode()
        except (binascii.Error, ValueError, UnicodeDecodeError):
            continue
    return None


def _mask_base64(text: str, known: list[str]) -> str:
    """Every base64 word of `text` whose decoded text holds a known secret, masked whole."""
    def one(m: re.Match[str]) -> str:
        word = m.group(0)
        if len(word) > _B64_MAX:
            return word
        decoded = _b64_text(word)
        if decoded is not None and any(s in decoded for s in known):
            return MASK
        return word
    return _B64_WORD.sub(one, text) if known else text


def redact(text: str, *, secrets: Iterable[str | None] = ()) -> str:
    """`text` with every credential it shows masked (see the module docstring)."""
    known = [s for s in secrets if s and len(s) >= MIN_LITERAL]
    known += _found_secrets(text, params=False)
    if "%" in text:  # a header or parameter sent percent-encoded is found once decoded
        known += _found_secrets(urllib.parse.unquote_plus(text), params=True)
    known += [s for s in list(known) if (d := urllib.parse.unquote(s)) != s and
              len(d) >= MIN_LITERAL]
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + (f"{m.group(2)} " if m.group(2) else "")
                            + MASK, text)
    text = _COOKIE.sub(lambda m: m.group(1) + MASK, text)
    text = _BASIC.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", text)
    text = _masked_query(text)
    text = _mask_base64(text, known)
    # longest first, so a secret that contains another is masked whole
    for secret in sorted(set(known), key=len, reverse=True):
        if secret in text or "%" in text or "\\" in text:
            text = _encoded(secret).sub(MASK, text)
    return text


def redacted_traceback(err: BaseException, *, secrets: Iterable[str | None] = ()) -> str:
    """`err`'s traceback as Python prints it, through `redact`."""
    return redact("".join(traceback.format_exception(err)), secrets=secrets)


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
