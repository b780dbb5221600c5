from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lc_rig import Rig, small_spec


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(f"sqlite:///{tmp_path / 'lc.db'}", small_spec())
    yield r
    r.store.close()
