"""Fuzz the API from its own OpenAPI schema (schemathesis): no 5xx, every error in one shape."""

from __future__ import annotations

import hypothesis
import schemathesis
from hypothesis import given

from .conftest import Server

MAX_EXAMPLES = 12  # per operation: bounded, the whole file stays well under a minute


def test_no_server_errors_and_one_error_shape(server: Server) -> None:
    schema = schemathesis.openapi.from_url(server.url + "/api/v1/openapi.json")
    checked: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path == "/api/v1/stream":
            continue  # a live stream, not a request/response (tests/server/test_stream.py)

        @given(case=operation.as_strategy())
        @hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                             suppress_health_check=list(hypothesis.HealthCheck))
        def fuzz(case: schemathesis.Case) -> None:
            resp = case.call(base_url=server.url, timeout=30)
            where = f"{case.method} {case.formatted_path} {case.query}"
            assert resp.status_code < 500, (where, resp.text[:300])
            if resp.status_code >= 400:
                body = resp.json()
                assert set(body) == {"error"}, (where, body)
                assert set(body["error"]) == {"status", "kind", "message"}, (where, body)
                assert body["error"]["status"] == resp.status_code

        fuzz()
        checked.append(f"{operation.method.upper()} {operation.path}")
    assert len(checked) >= 9 and "POST /api/v1/racks/{rack_id}/drain" in checked, checked
