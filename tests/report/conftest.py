from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rackscale.fleet import Topology, seed_fleet
from rackscale.store import Store, load_topology


@pytest.fixture(scope="session")
def topo() -> Topology:
    return Topology.build(seed_fleet("seed-504"))


@pytest.fixture
def fleet_store(tmp_path: Path, topo: Topology) -> Iterator[Store]:
    """A SQLite store with the seed fleet loaded by the real loader, and nothing else."""
    store = Store(f"sqlite:///{tmp_path}/rackscale.db")
    load_topology(store, topo, actor="test", reason="report tests")
    yield store
    store.close()
