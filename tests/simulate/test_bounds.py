"""Every number the simulator takes has bounds, and a value past them (1e300 minutes, inf,
NaN) is refused with exit 2 naming the option, before anything runs: as a class, over every
float field of the job config and the storage figures, and on the command line for the
options the operator types."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from rackscale.cli import app
from rackscale.simulate.config import SimConfig, SimulateError, make_config
from rackscale.simulate.storage import StorageTimes


def _bounds(model: type[BaseModel]) -> dict[str, tuple[float, float]]:
    """(lowest, highest) of every float field, from its constraints."""
    out = {}
    for name, f in model.model_fields.items():
        if f.annotation not in (float, float | None):
            continue
        lo = next((getattr(m, a) for m in f.metadata for a in ("ge", "gt")
                   if getattr(m, a, None) is not None), -math.inf)
        hi = next((getattr(m, a) for m in f.metadata for a in ("le", "lt")
                   if getattr(m, a, None) is not None), math.inf)
        out[name] = (lo, hi)
    return out


@pytest.mark.parametrize("model", [SimConfig, StorageTimes])
def test_every_float_field_has_finite_bounds(model: type[BaseModel]) -> None:
    bounds = _bounds(model)
    assert bounds, model
    unbounded = [n for n, (lo, hi) in bounds.items() if not (math.isfinite(lo)
                                                             and math.isfinite(hi))]
    assert not unbounded, f"{model.__name__}: no finite bound on {unbounded}"


SIM_BOUNDS = _bounds(SimConfig)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SIM_BOUNDS)), st.one_of(
    st.floats(min_value=1.0001, max_value=1e308), st.just(math.inf), st.just(math.nan)))
def test_a_value_past_a_bound_is_refused_naming_the_option(field: str, factor: float) -> None:
    _lo, hi = SIM_BOUNDS[field]
    value = factor if not math.isfinite(factor) else max(hi * factor, hi + 1)
    with pytest.raises(SimulateError, match=field.replace("_", "-")):
        make_config(job_gpus=72, **{field: value})
    make_config(job_gpus=72, **{field: hi})  # the bound itself is accepted


def _storage(**over: Any) -> dict[str, Any]:
    return {"save_stall_s": 1.0, "durable_local_s": 2.0, "durable_region_s": 3.0,
            "restore_local_s": 1.0, "restore_region_s": 2.0} | over


@pytest.mark.parametrize("field", sorted(_bounds(StorageTimes)))
def test_a_storage_figure_past_its_bound_is_refused(field: str) -> None:
    hi = _bounds(StorageTimes)[field][1]
    with pytest.raises(ValidationError, match=field):
        StorageTimes(**_storage(**{field: hi * 10}))


@pytest.mark.parametrize("option", ["--restart-min", "--detect-min", "--ckpt-cost-s",
                                    "--start-min", "--straggler-detect-min",
                                    "--ckpt-interval-min", "--rack-repair-h", "--rate-scale",
                                    "--repair-scale", "--straggler-slowdown", "--days"])
@pytest.mark.parametrize("value", ["1e300", "inf", "nan"])
def test_the_command_refuses_an_absurd_value(option: str, value: str) -> None:
    days = [] if option == "--days" else ["--days", "1"]
    r = CliRunner().invoke(app, ["simulate", "run", "--fleet", "seed-504", "--trials", "2",
                                 *days, option, value])
    assert r.exit_code == 2, (option, value, r.output)
    assert option.removeprefix("--") in r.output and "Traceback" not in r.output


def test_a_soaks_compressed_fault_rate_is_within_bounds() -> None:
    # A soak plays a year of published faults in minutes: a measured one ran 518,287x.
    assert make_config(job_gpus=72, rate_scale=518_287.524).rate_scale > 1000
