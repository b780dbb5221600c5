"""`simulate run` on a mixed fleet: the job runs on one pool (a rack template or a GPU SKU),
the largest by default, and every output says which."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.fleet import parse_fleet
from rackscale.simulate import FleetShape, SimulateError, make_config, plan

runner = CliRunner()
MIXED = """\
name: mixed-sim
regions:
  - name: a
    racks: [{template: gb200-nvl72, count: 2}]
  - name: b
    racks: [{template: hgx-h100, count: 3}, {template: vr-nvl72, count: 1}]
"""


@pytest.fixture
def mixed_file(tmp_path: Path) -> str:
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    return str(path)


def _run(mixed_file: str, *args: str) -> dict:
    res = runner.invoke(app, ["simulate", "run", "--fleet", mixed_file, "--days", "3",
                              "--trials", "10", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_default_pool_is_the_largest_and_the_job_fills_it(mixed_file: str) -> None:
    out = _run(mixed_file)
    assert (out["pool"], out["pool_gpus"], out["fleet_gpus"]) == ("gb200-nvl72", 144, 312)
    assert out["job_gpus"] == 144 and out["units_job"] == 2 and out["simulated"] is True


@pytest.mark.parametrize(("pool", "gpus", "domains"), [
    ("hgx-h100", 96, 12),  # by rack template: 3 racks x 4 nodes, each node a domain
    ("h100-sxm", 96, 12),  # by GPU SKU: the same racks
    ("rubin", 72, 1),
])
def test_pool_is_chosen_by_template_or_sku(mixed_file: str, pool: str, gpus: int,
                                           domains: int) -> None:
    out = _run(mixed_file, "--pool", pool)
    assert (out["pool"], out["pool_gpus"], out["units_job"]) == (pool, gpus, domains)


def test_table_output_names_the_pool(mixed_file: str) -> None:
    res = runner.invoke(app, ["simulate", "run", "--fleet", mixed_file, "--days", "2",
                              "--trials", "5"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "pool gb200-nvl72 (144 of the 312 GPUs of fleet mixed-sim" in text


def test_sweep_takes_the_pool(mixed_file: str, tmp_path: Path) -> None:
    res = runner.invoke(app, ["simulate", "sweep", "--fleet", mixed_file, "--pool", "hgx-h100",
                              "--values", "30", "--days", "2", "--trials", "5", "--out",
                              str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output


def test_unknown_pool_exits_2_listing_the_fleets_pools(mixed_file: str) -> None:
    res = runner.invoke(app, ["simulate", "run", "--fleet", mixed_file, "--pool", "b200"])
    assert res.exit_code == 2
    assert "gb200-nvl72, hgx-h100, vr-nvl72" in res.output and "h100-sxm" in res.output


def test_a_job_larger_than_its_pool_is_refused() -> None:
    shape = FleetShape.from_spec(parse_fleet(MIXED), "rubin")
    with pytest.raises(SimulateError, match=r"pool rubin \(72 of the 312 GPUs"):
        plan(make_config(job_gpus=144), shape)


def test_single_template_fleet_is_its_own_pool() -> None:
    from rackscale.fleet import seed_fleet

    shape = FleetShape.from_spec(seed_fleet())
    assert (shape.pool, shape.gpus, shape.mixed) == ("vr-nvl72", 504, False)
