from __future__ import annotations

import pytest

from rackscale.simulate import CAUSES, FAILURE_MODELS, UnknownFailureModel, failure_model

# The fault kinds (docs/formats.md), plus the simulator's names for causes that are no twin fault.
DESIGN_KINDS = {"slow_gpu", "hbm_degraded", "gpu_dead", "sdc", "nvlink_port_down",
                "nvlink_switch_down", "nvlink_switch_degraded", "bad_cable", "nic_dead",
                "leaf_degraded", "leaf_down", "coolant_flow_low", "power_shelf_down", "flapping"}


def test_llama3_counts_and_rate():
    assert sum(c.count for c in CAUSES) == 419
    assert CAUSES[0].name == "faulty GPU" and CAUSES[0].count == 148
    m = failure_model("llama3")
    assert m.rate_per_gpu_h == pytest.approx(419 / (16_384 * 54 * 24))
    assert sum(m.shares) == pytest.approx(1.0)


def test_rsc_rates_per_node_day():
    assert failure_model("rsc-1").rate_per_gpu_h * 8 * 24 == pytest.approx(6.5e-3)
    assert failure_model("rsc-2").rate_per_gpu_h * 8 * 24 == pytest.approx(2.34e-3)


def test_every_cause_maps_to_a_design_kind_or_a_named_non_hardware_kind():
    for c in CAUSES:
        assert c.kind in DESIGN_KINDS | {"software", "host"}, c
        assert (c.kind == "software") == (c.scope == "none")


def test_unknown_model_lists_valid_names():
    with pytest.raises(UnknownFailureModel, match="valid failure models: llama3, rsc-1, rsc-2"):
        failure_model("nope")
    assert set(FAILURE_MODELS) == {"llama3", "rsc-1", "rsc-2"}
