"""What a new user meets first: a core install without extras, and commands that default to the
fleet loaded in the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

runner = CliRunner()


def _cli_without(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter where `module` cannot be imported (as after a core
    install without its extra), although it is installed here."""
    code = (f"import sys; sys.modules[{module!r}] = None; sys.argv = ['rackscale', *{args!r}]; "
            "from rackscale.cli import main; main()")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_probe_without_torch_names_the_extra(tmp_path: Path) -> None:
    res = _cli_without("torch", ["certify", "probe", "gemm"], tmp_path)
    assert res.returncode == 2, res.stderr
    assert "rackscale[torch]" in res.stderr
    assert "Traceback" not in res.stderr and "ModuleNotFoundError" not in res.stderr


def test_probe_without_torch_json_is_still_an_error(tmp_path: Path) -> None:
    res = _cli_without("torch", ["certify", "probe", "hbm", "--json"], tmp_path)
    assert res.returncode == 2
    assert "rackscale[torch]" in res.stderr + res.stdout
    if res.stdout.strip():  # a --json error object, where the CLI prints one
        json.loads(res.stdout)
