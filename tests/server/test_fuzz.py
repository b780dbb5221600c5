"""Fuzz the API from its own OpenAPI schema (schemathesis): no 5xx, every error in one shape."""

from __future__ import annotations

import hypothesis
import pytest
import schemathesis

from .conftest import Server, request


@pytest.fixture(scope="module")
def api_schema(server: Server) -> schemathesis.BaseSchema:
    _, raw = request(server.url + "/api/v1/openapi.json")
    return schemathesis.openapi.from_dict(raw).configure(base_url=server.url)


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis.settings(max_examples=15, deadline=None, database=None,
                     suppress_health_check=list(hypothesis.HealthCheck))
def test_no_server_errors(case: schemathesis.Case) -> None:
    resp = case.call(timeout=30)
    assert resp.status_code < 500, (case.method, case.formatted_path, resp.text[:300])
    if resp.status_code >= 400:
        body = resp.json()
        assert set(body) == {"error"} and set(body["error"]) == {"status", "kind", "message"}
        assert body["error"]["status"] == resp.status_code
