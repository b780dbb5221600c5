"""`rackscale.lazy.lazy_exports`: the one lazy `__getattr__` of the rooms' packages (certify,
its runners, checkpoint, recovery)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import rackscale.certify
import rackscale.certify.runners


def _package(tmp_path: Path) -> str:
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "from rackscale.lazy import lazy_exports\n"
        "_EXPORTS = {'heavy_value': 'heavy'}\n"
        "__getattr__ = lazy_exports(__name__, _EXPORTS, globals())\n")
    (pkg / "heavy.py").write_text("heavy_value = 42\n")
    return "lazypkg"


def test_a_name_imports_its_module_on_first_use_only(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    pkg = importlib.import_module(_package(tmp_path))
    try:
        assert "lazypkg.heavy" not in sys.modules
        assert pkg.heavy_value == 42
        assert "lazypkg.heavy" in sys.modules
        assert vars(pkg)["heavy_value"] == 42  # kept: later reads are plain attributes
        with pytest.raises(AttributeError, match="module 'lazypkg' has no attribute 'nope'"):
            _ = pkg.nope
    finally:
        for name in [m for m in sys.modules if m.startswith("lazypkg")]:
            del sys.modules[name]


@pytest.mark.parametrize("package", [rackscale.certify, rackscale.certify.runners])
def test_the_rooms_export_every_name_they_list(package: object) -> None:
    for name in package.__all__:  # type: ignore[attr-defined]
        if name in {"TorchBackend", "SlurmRunner"}:
            continue  # torch / a Slurm client: covered where those run
        assert getattr(package, name) is not None
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = package.Nope  # type: ignore[attr-defined]


def test_a_rank_agent_imports_without_the_store_or_the_fleet_model() -> None:
    """Why the rooms load lazily: the rank agent runs on a bare GPU machine (torch only)."""
    import subprocess

    code = ("import sys, rackscale.certify.runners.agent, rackscale.certify.runners.fabric_env;"
            "print(sorted(m for m in ('sqlalchemy', 'pydantic', 'rackscale.fleet', "
            "'rackscale.store') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
