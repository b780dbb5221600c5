"""`certify findings` and `GET /api/v1/findings` are one listing: on a store with one
certification run on the twin, the same filters give the same findings in the same order."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.server import ServerConfig, create_app

FILTERS = [{}, {"kind": "slow_gpu"}, {"rack": "us-west/r03"}, {"stage": "1"},
           {"stage": "gpu"}, {"stage": "multi-rack", "kind": "bad_cable"}, {"kind": "none"}]


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('find') / 'f.db'}"
    run = CliRunner()
    assert run.invoke(app, ["fleet", "load", "--fleet", "seed-504", "--db", url]).exit_code == 0
    res = run.invoke(app, ["certify", "run", "--faults", "demo", "--db", url, "--out",
                           str(tmp_path_factory.mktemp("out"))])
    assert res.exit_code == 1, res.output  # 1: the run has failing findings
    return url


@pytest.mark.parametrize("want", FILTERS, ids=lambda w: ",".join(f"{k}={v}" for k, v in
                                                                    w.items()) or "all")
def test_the_cli_and_the_api_list_the_same_findings(db: str, want: dict[str, str]) -> None:
    args = [a for k, v in want.items() for a in (f"--{k}", v)]
    res = CliRunner().invoke(app, ["certify", "findings", "--db", db, "--json", *args])
    assert res.exit_code == 0, res.output
    cli = [(f["component"], f["kind"]) for f in json.loads(res.output)["findings"]]
    client = TestClient(create_app(ServerConfig(db=db)))
    query = "&".join(f"{k}={v}" for k, v in want.items())
    api = [(f["component"], f["kind"]) for f in
           client.get(f"/api/v1/findings?limit=500&{query}").json()["items"]]
    assert cli == api
    if want.get("kind") == "none":
        assert cli == []
    elif not want:
        assert len(cli) >= 5  # the demo faults are found
