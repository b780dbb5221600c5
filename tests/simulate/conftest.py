from __future__ import annotations

import pytest

from rackscale.fleet import FleetSpec, RackGroup, RegionSpec, seed_fleet, synthetic_fleet
from rackscale.simulate import FleetShape


def hgx_fleet(racks: int) -> FleetShape:
    """HGX H100 racks of 4 nodes: one 8-GPU NVLink domain per node, as in Meta's RSC."""
    spec = FleetSpec(name=f"hgx-{racks}", regions=[
        RegionSpec(name="a", racks=[RackGroup(template="hgx-h100", count=racks)])])
    return FleetShape.from_spec(spec)


@pytest.fixture(scope="session")
def seed504() -> FleetShape:
    return FleetShape.from_spec(seed_fleet("seed-504"))


@pytest.fixture(scope="session")
def nvl20() -> FleetShape:
    return FleetShape.from_spec(synthetic_fleet(20))


@pytest.fixture(scope="session")
def hgx2200() -> FleetShape:
    return hgx_fleet(550)  # 2,200 nodes: 2,048 for the job, 152 spares
