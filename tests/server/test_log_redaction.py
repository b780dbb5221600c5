"""The server's log redacts what a traceback quotes: a store URL's password, the API token,
an Authorization header."""

from __future__ import annotations

import logging

import pytest

from rackscale.redact import MASK, RedactingFormatter, redact_logs
from rackscale.server.run import SERVER_LOGGERS

TOKEN = "tok-" + "9" * 40
PASSWORD = "Pa55-w0rd-in-url"


def test_a_traceback_through_the_server_loggers_is_redacted(
        capsys: pytest.CaptureFixture[str]) -> None:
    # The logger the server's unhandled-error handler writes to, wired as `serve` wires it.
    logger = logging.getLogger("rackscale.server")
    wired = [logging.getLogger(n) for n in ("", *SERVER_LOGGERS)]
    saved = [(lg, list(lg.handlers), lg.propagate,
              [h.formatter for h in lg.handlers]) for lg in wired]
    try:
        redact_logs(SERVER_LOGGERS, secrets=[TOKEN])
        try:
            raise RuntimeError(f"cannot reach postgresql://ops:{PASSWORD}@db:5432/fleet "
                               f"with headers {{'Authorization': 'Bearer {TOKEN}'}}")
        except RuntimeError:
            logger.exception("unhandled error on GET /api/v1/racks")
        err = capsys.readouterr().err
    finally:  # leave logging as the other tests expect it
        for lg, handlers, propagate, formatters in saved:
            lg.handlers[:], lg.propagate = handlers, propagate
            for h, f in zip(handlers, formatters, strict=True):
                h.setFormatter(f)
    assert "Traceback" in err and "unhandled error" in err  # the traceback is still there
    assert PASSWORD not in err and TOKEN not in err and MASK in err


def test_wrapping_twice_does_not_nest() -> None:
    handler = logging.StreamHandler()
    logger = logging.getLogger("rackscale.test-twice")
    logger.addHandler(handler)
    try:
        redact_logs(["rackscale.test-twice"], secrets=["abcd-secret"])
        redact_logs(["rackscale.test-twice"], secrets=["abcd-secret"])
        fmt = handler.formatter
        assert isinstance(fmt, RedactingFormatter)
        assert not isinstance(fmt.inner, RedactingFormatter)
    finally:
        logger.removeHandler(handler)
