"""docs/extending.md stays true: each of its Python examples runs, in order, against a fresh
store, and whatever it registers is gone afterwards."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import pytest

from rackscale.certify import PROBES
from rackscale.faults import FAULT_KINDS
from rackscale.fleet import TEMPLATES
from rackscale.simulate import FAILURE_MODELS
from rackscale.store import EVENT_KINDS, Store, load_topology

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
REGISTRIES = (TEMPLATES, PROBES, FAULT_KINDS, FAILURE_MODELS, EVENT_KINDS)


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)


def test_the_guide_has_an_example_per_extension_point() -> None:
    text = DOC.read_text()
    for heading in ("## A rack template", "## A probe", "## A fault kind", "## A power driver",
                    "## A failure model", "## An event kind"):
        assert heading in text
    assert len(_examples()) >= 6


def test_every_example_runs(tmp_path: Path) -> None:
    before = [set(r) for r in REGISTRIES]
    namespace: dict[str, object] = {}
    with ExitStack() as stack:
        for registry in REGISTRIES:
            stack.enter_context(registry.scoped())
        for n, code in enumerate(_examples()):
            if "store" in code and "store" not in namespace:
                # the driver example runs against a store loaded with the topology so far
                store = Store(f"sqlite:///{tmp_path / 'ext.db'}")
                stack.callback(store.close)
                load_topology(store, namespace["topo"])  # type: ignore[arg-type]
                namespace["store"] = store
            try:
                exec(compile(code, f"{DOC.name}[example {n + 1}]", "exec"), namespace)
            except Exception as err:  # name the example that broke
                pytest.fail(f"example {n + 1} of {DOC.name} failed: {err!r}\n{code}")
        assert "gemm_small" in PROBES and "dirty_optic" in FAULT_KINDS
        assert "example.incident" in EVENT_KINDS
    assert [set(r) for r in REGISTRIES] == before  # the examples' registrations are undone


def test_the_examples_pass_the_strict_type_check(tmp_path: Path) -> None:
    """The guide's code, as one module in its order, is clean under `mypy --strict` (the
    check rackscale's own code passes). `store` is the reader's Store, as the guide says."""
    from mypy import api

    module = tmp_path / "extending_examples.py"
    prelude = "from rackscale.store import Store\n\nstore: Store\n\n"
    module.write_text(prelude + "\n\n".join(_examples()))
    out, err, code = api.run(["--strict", "--no-incremental", "--follow-imports", "silent",
                              "--cache-dir", str(tmp_path / "cache"), str(module)])
    assert code == 0, out + err
