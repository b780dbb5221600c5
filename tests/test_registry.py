"""One registry type for everything chosen by name (rack templates, probes, fault kinds, failure
models): an unknown name is a UserError that lists every valid name, and tests can undo what
they register."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rackscale.certify import PROBES, UnknownProbe
from rackscale.errors import UserError
from rackscale.faults import FAULT_KINDS, UnknownFaultKind, get_kind
from rackscale.fleet import TEMPLATES, UnknownTemplate, get_template
from rackscale.registry import Registry, UnknownName
from rackscale.simulate import FAILURE_MODELS, UnknownFailureModel, failure_model

REGISTRIES = [
    pytest.param(TEMPLATES, UnknownTemplate, "valid templates: ", id="templates"),
    pytest.param(PROBES, UnknownProbe, "valid probes: ", id="probes"),
    pytest.param(FAULT_KINDS, UnknownFaultKind, "valid kinds: ", id="fault-kinds"),
    pytest.param(FAILURE_MODELS, UnknownFailureModel, "valid failure models: ",
                 id="failure-models"),
]


@pytest.mark.parametrize(("registry", "error", "heading"), REGISTRIES)
def test_every_named_choice_is_one_registry_type(registry: Registry, error: type,
                                                 heading: str) -> None:
    assert isinstance(registry, Registry)
    assert issubclass(error, UnknownName) and issubclass(error, UserError)
    with pytest.raises(error) as caught:
        registry["no-such-name"]
    message = str(caught.value)
    assert message.startswith("unknown ") and "'no-such-name'" in message
    assert message.split(heading, 1)[1] == ", ".join(registry.names())
    assert set(registry.names()) == set(registry)


@given(st.text(min_size=1, max_size=20))
def test_an_unknown_name_lists_the_valid_ones(name: str) -> None:
    for registry, lookup in ((TEMPLATES, get_template), (FAULT_KINDS, get_kind),
                             (FAILURE_MODELS, failure_model)):
        if name in registry:
            continue
        with pytest.raises(UnknownName) as caught:
            lookup(name)
        assert all(valid in str(caught.value) for valid in registry)


def test_register_lookup_and_reset() -> None:
    shapes: Registry[int] = Registry("shape", plural="shapes", sort_names=True)
    shapes.add("square", 4)

    @shapes.register("triangle")
    def _three() -> int:
        return 3

    assert shapes["square"] == 4 and shapes["triangle"]() == 3
    assert shapes.names() == ["square", "triangle"] and len(shapes) == 2
    assert shapes.get("circle") is None and "circle" not in shapes
    with pytest.raises(ValueError, match="shape 'square' is registered twice"):
        shapes.add("square", 5)
    with shapes.scoped():
        shapes.add("pentagon", 5)
        assert "pentagon" in shapes
    assert "pentagon" not in shapes  # what the block registered is gone
    copy = shapes.copy()
    copy.unregister("square")
    assert "square" in shapes and "square" not in copy
    with pytest.raises(UnknownName, match="valid shapes: square, triangle"):
        shapes.unregister("hexagon")


def test_a_registered_probe_is_gone_after_the_scope() -> None:
    with PROBES.scoped():
        PROBES.add("example_probe", lambda backend: None)  # type: ignore[arg-type, return-value]
        assert "example_probe" in PROBES.names()
    assert "example_probe" not in PROBES
