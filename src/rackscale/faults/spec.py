"""The faults file (YAML, docs/formats.md) the digital twin applies, validated with line numbers.

    faults:
      - {target: us-east/r02/c07/gpu3, kind: slow_gpu, severity: 0.88}
      - {target: us-east/r04/s02, kind: nvlink_switch_down}
      - {target: us-east/r03/c14/nic0, kind: flapping, of: bad_cable, severity: 0.3, duty: 0.3}
      - {target: us-west/r01/c02/nic1, kind: flapping, of: bad_cable, duty: 0.3}

`severity` is the fraction of nominal that remains (0 = dead) and is required exactly for the
kinds that have one. A `flapping` fault carries the kind it flaps (`of`), optionally that
kind's severity (default 0.5 while present: half of nominal), `duty` (fraction of time
present) and optionally `period_s` (one on/off cycle, default 600 s).
Validation happens twice: the shape with pydantic, then every target against the topology;
both report `file:line: faults[i].field: problem. Fix: ...` and exit 2 from the CLI.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rackscale.faults.kinds import FAULT_KINDS, FLAPPING, get_kind
from rackscale.fleet import SpecError, Topology, YamlSource, load_yaml, read_yaml, validate

DEFAULT_FLAP_PERIOD_S = 600.0
# Severity of a flapping fault whose flapped kind has one and none is given: while present the
# part runs at half of nominal. Half is far below every kind's detection line and far above
# the "down" line (5%), so the finding keeps the kind that was written (a bad cable, not a
# dead NIC).
DEFAULT_FLAP_SEVERITY = 0.5


class Fault(BaseModel):
    # strict: `severity: false` is not 0; no inf/nan: `period_s: .inf` is not a period.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    target: Annotated[str, Field(min_length=1)]
    kind: str
    severity: Annotated[float, Field(ge=0.0, lt=1.0)] | None = None
    of: str | None = None
    duty: Annotated[float, Field(gt=0.0, lt=1.0)] | None = None
    period_s: Annotated[float, Field(gt=0.0)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _flap_severity(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == FLAPPING \
                and data.get("severity") is None and isinstance(data.get("of"), str) \
                and data["of"] in FAULT_KINDS and FAULT_KINDS[data["of"]].has_severity:
            return {**data, "severity": DEFAULT_FLAP_SEVERITY}
        return data

    @model_validator(mode="after")
    def _kind_fields(self) -> Fault:
        if self.kind not in FAULT_KINDS:
            raise ValueError(FAULT_KINDS.unknown_message(self.kind))
        if self.kind == FLAPPING:
            if self.of is None or self.duty is None:
                raise ValueError("a flapping fault needs `of` (the kind it flaps) and `duty` "
                                 "(fraction of time present, 0..1)")
            if self.of == FLAPPING or self.of not in FAULT_KINDS:
                valid = [k for k in FAULT_KINDS if k != FLAPPING]
                raise ValueError(f"flapping `of: {self.of}` is not a kind that can flap; "
                                 f"use one of: {', '.join(valid)}")
        elif self.of is not None or self.duty is not None or self.period_s is not None:
            raise ValueError(f"`of`, `duty` and `period_s` belong to flapping faults only; "
                             f"remove them from this {self.kind} fault")
        base = get_kind(self.effective_kind)
        if base.has_severity and self.severity is None:
            raise ValueError(f"{base.name} needs a severity (fraction of nominal that "
                             "remains, 0..1)")
        if not base.has_severity and self.severity is not None:
            raise ValueError(f"{base.name} is an on/off fault; remove severity")
        return self

    @property
    def effective_kind(self) -> str:
        """The kind that acts when the fault is present (the flapped kind for flapping)."""
        return self.of if self.kind == FLAPPING and self.of else self.kind

    @property
    def flap_period_s(self) -> float:
        return self.period_s or DEFAULT_FLAP_PERIOD_S


class FaultsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    version: int = 1
    faults: list[Fault] = []


def _check_topology(ff: FaultsFile, topo: Topology, src: YamlSource | None) -> None:
    def where(i: int, key: str) -> str:
        return src.where(("faults", i, key)) if src else "<faults>"

    seen: dict[tuple[str, str], int] = {}
    for i, f in enumerate(ff.faults):
        if f.target not in topo.index:
            raise SpecError(f"{where(i, 'target')}: faults[{i}].target: "
                            f"{topo._unknown_message(f.target)}. Fix: use a component id of "
                            f"fleet {topo.spec.name}")
        kind = get_kind(f.effective_kind)
        actual = topo.kinds[topo.index[f.target]]
        if actual not in kind.target_kinds:
            raise SpecError(f"{where(i, 'target')}: faults[{i}].target: {f.target} is a "
                            f"{actual}, but {kind.name} sits on a "
                            f"{' or '.join(kind.target_kinds)}. Fix: point it at one")
        key = (f.target, f.effective_kind)
        if key in seen:
            raise SpecError(f"{where(i, 'target')}: faults[{i}]: {f.effective_kind} on "
                            f"{f.target} is already given at faults[{seen[key]}]. Fix: keep one")
        seen[key] = i


def _checked(src: YamlSource, topo: Topology) -> FaultsFile:
    ff = validate(FaultsFile, src)
    _check_topology(ff, topo, src)
    return ff


def parse_faults(text: str, topo: Topology, filename: str = "<faults>") -> FaultsFile:
    return _checked(load_yaml(text, filename), topo)


def load_faults(path: str, topo: Topology) -> FaultsFile:
    return _checked(read_yaml(path, "faults"), topo)


def faults_from(faults: list[Fault], topo: Topology) -> FaultsFile:
    """A faults file built in code (tests, benchmarks), checked against the topology."""
    ff = FaultsFile(faults=faults)
    _check_topology(ff, topo, None)
    return ff


DEMO_FAULTS = "demo-faults.yaml"


def demo_faults_path() -> str:
    """Path of the faults file shipped for `rackscale demo` (package data)."""
    return str(resources.files("rackscale.faults").joinpath("data", DEMO_FAULTS))
