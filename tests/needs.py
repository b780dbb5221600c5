"""What `make test` installs is required: a test whose part is missing (root, tc, torch,
Slurm) fails with the reason and what to do, as the PostgreSQL fixture does; it does not
skip, so a green run never hides a part that did not run."""

from __future__ import annotations

import pytest


def require(why: str | None) -> None:
    """Fail the calling test (or, at module level, its module) when `why` names a missing
    part."""
    if why is not None:
        pytest.fail(f"{why}; `make test` installs and sets this up (run it as root)",
                    pytrace=False)
