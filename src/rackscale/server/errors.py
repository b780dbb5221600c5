"""One JSON shape for every error the server returns, whatever raised it:

    {"error": {"status": 404, "kind": "not_found", "message": "..."}}

A 500 never carries the exception text (it could hold a database URL); the server logs the
traceback, the client gets a message that says where to look.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rackscale.errors import UserError
from rackscale.lifecycle import (
    EvidenceMissing,
    IllegalTransition,
    InterlockRefused,
    UnknownLifecycleComponent,
)
from rackscale.redact import redact

log = logging.getLogger("rackscale.server")

_KINDS = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 409: "conflict", 413: "body_too_large",
          422: "invalid_request", 500: "internal_error"}
# A refusal by the lifecycle's own rules is a conflict with the rack's state, not bad input.
_CONFLICTS = (IllegalTransition, InterlockRefused, EvidenceMissing)


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message = status, message
        self.kind = kind or _KINDS.get(status, "error")
        self.headers = headers


ERROR_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["status", "kind", "message"],
        "properties": {"status": {"type": "integer"}, "kind": {"type": "string"},
                       "message": {"type": "string"}}}},
}


def error_response(status: int, message: str, kind: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    # Every message goes out through the one redaction: an error text that quotes a database
    # URL or an echoed credential is masked here, whichever handler built it.
    return JSONResponse({"error": {"status": status, "kind": kind or _KINDS.get(status, "error"),
                                   "message": redact(message)}},
                        status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_: Request, err: ApiError) -> JSONResponse:
        return error_response(err.status, err.message, err.kind, err.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> JSONResponse:
        message = err.detail if isinstance(err.detail, str) else str(err.detail)
        if err.status_code == 404 and message == "Not Found":
            message = "no such path; the API is under /api/v1 (see /api/v1/openapi.json)"
        return error_response(err.status_code, message, headers=getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        parts = []
        for e in err.errors()[:5]:
            where = ".".join(str(x) for x in e.get("loc", ()))
            parts.append(f"{where}: {e.get('msg', 'invalid')}")
        return error_response(422, "; ".join(parts) or "invalid request")

    @app.exception_handler(UserError)
    async def _user(_: Request, err: UserError) -> JSONResponse:
        if isinstance(err, UnknownLifecycleComponent):
            return error_response(404, str(err))
        return error_response(409 if isinstance(err, _CONFLICTS) else 400, str(err))

    @app.exception_handler(Exception)
    async def _crash(request: Request, err: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error; the server log has the traceback")
