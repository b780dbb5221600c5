"""Provenance is one enum: the backend that answered (twin, real) and the word a report prints
(simulated, measured) are mapped in one place, and nothing else tests the strings."""

from __future__ import annotations

import json
import re
from pathlib import Path

from rackscale.certify import Measurement, TwinBackend
from rackscale.provenance import MEASURED, SIMULATED, Provenance

SRC = Path(__file__).resolve().parents[1] / "src" / "rackscale"


def test_each_backend_has_one_basis() -> None:
    assert Provenance.TWIN.basis == SIMULATED and Provenance.REAL.basis == MEASURED
    assert Provenance.TWIN.described == "simulated on the digital twin"
    assert Provenance.of_basis(MEASURED) is Provenance.REAL
    assert Provenance.of_basis(SIMULATED) is Provenance.TWIN
    assert Provenance.parse("real") is Provenance.REAL and Provenance.parse("lab") is None
    # members are the stored strings: events and JSON keep their format
    assert json.dumps({"backend": Provenance.TWIN}) == '{"backend": "twin"}'
    assert TwinBackend.name is Provenance.TWIN


def test_a_measurement_says_where_it_came_from() -> None:
    import numpy as np

    for backend in Provenance:
        m = Measurement(probe="gemm", unit="TFLOPS", backend=backend, values=np.ones(1))
        assert m.source == backend.basis


def test_no_room_tests_the_provenance_strings_itself() -> None:
    pattern = re.compile(r"""[!=]= *["'](twin|real)["']|["'](twin|real)["'] *[!=]=""")
    offenders = [f"{p.relative_to(SRC)}:{n}" for p in sorted(SRC.rglob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert not offenders, offenders
