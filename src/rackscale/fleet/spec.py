"""The fleet spec (YAML, validated with pydantic) and the built-in seed fleets.

Format (version 1), as in docs/formats.md:

    name: seed-504
    regions:
      - name: us-east
        racks: [{template: vr-nvl72, count: 4}]
      - name: us-west
        racks: [{template: vr-nvl72, count: 3}]
    network: {racks_per_leaf: 2, spines_per_region: 8}   # optional

A rack group may name its racks (`names: [r01, r07]`); otherwise racks are numbered r01, r02,
... per region in the order they are listed, skipping names already taken.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rackscale.fleet.templates import TEMPLATES
from rackscale.fleet.yamlsrc import SpecError, YamlSource, load_yaml, read_yaml, validate

NAME = r"^[a-z0-9][a-z0-9-]*$"
_NAME_RE = re.compile(NAME)
# A fleet name is shown in every table and stored as the subject of fleet events: one word,
# no path separator, no Rich markup brackets, no control characters.
FLEET_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
MAX_NAME = 63
# Names the topology gives to a region's network parts (`leaf-rail0-0`, `spine-3`): a rack
# may not start with them, or its id would be a leaf's or a spine's and one row would
# overwrite the other in the inventory.
RESERVED_RACK_PREFIXES = ("leaf-", "spine-")

# Caps that keep memory and time bounded. The design target is ~128k GPUs; a fleet beyond
# it needs `max_gpus` in the spec (up to HARD_MAX_GPUS, what one machine can still model).
DEFAULT_MAX_GPUS = 131_072
HARD_MAX_GPUS = 524_288
MAX_RACKS_PER_GROUP = 10_000
MAX_GROUPS = 1_000
MAX_REGIONS = 64
MAX_SPINES = 1_024
MAX_RACKS_PER_LEAF = 1_024

Name = Annotated[str, Field(pattern=NAME, max_length=MAX_NAME)]


class _Strict(BaseModel):
    # strict: `count: "3"` or `count: true` is a mistake to report, not a value to coerce;
    # no inf/nan: a budget of .inf kW is not a budget.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class RackGroup(_Strict):
    template: str
    count: Annotated[int, Field(gt=0, le=MAX_RACKS_PER_GROUP)] | None = None
    names: Annotated[list[Name], Field(max_length=MAX_RACKS_PER_GROUP)] | None = None
    # HGX only: 8-GPU nodes per rack (the template's default when omitted).
    nodes_per_rack: Annotated[int, Field(gt=0, le=16)] | None = None

    @field_validator("template")
    @classmethod
    def _known_template(cls, v: str) -> str:
        if v not in TEMPLATES:
            raise ValueError(TEMPLATES.unknown_message(v))
        return v

    @field_validator("names")
    @classmethod
    def _not_reserved(cls, v: list[str] | None) -> list[str] | None:
        for n in v or []:
            if n.startswith(RESERVED_RACK_PREFIXES):
                raise ValueError(
                    f"rack name {n!r} starts with {n.split('-')[0]}-, which names the region's "
                    "network switches (leaf-railK-G, spine-K); choose another rack name"
                )
        return v

    @model_validator(mode="after")
    def _count_and_names(self) -> RackGroup:
        if self.count is None and self.names is None:
            raise ValueError("give count (how many racks) or names (one per rack)")
        if self.names is not None and self.count is not None and self.count != len(self.names):
            raise ValueError(
                f"count is {self.count} but {len(self.names)} names are listed; make them agree"
            )
        if self.nodes_per_rack is not None and not TEMPLATES[self.template].nodes_per_rack_varies:
            raise ValueError(
                f"nodes_per_rack applies to HGX templates only; {self.template} always holds "
                f"{TEMPLATES[self.template].trays} compute trays"
            )
        return self

    @property
    def rack_count(self) -> int:
        return self.count if self.count is not None else len(self.names or [])


class RegionSpec(_Strict):
    name: Name
    racks: Annotated[list[RackGroup], Field(min_length=1, max_length=MAX_GROUPS)]
    # Facility power available to the region's racks, kW; lifecycle's power sequencing never
    # exceeds it. None = unlimited.
    power_budget_kw: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _unique_rack_names(self) -> RegionSpec:
        seen: set[str] = set()
        for group in self.racks:
            for n in group.names or []:
                if n in seen:
                    raise ValueError(f"rack name {n!r} appears twice in region {self.name}")
                seen.add(n)
        return self

    def rack_names(self) -> list[tuple[str, RackGroup]]:
        """Every rack of the region with its group, auto-numbering unnamed racks r01, r02..."""
        taken = {n for g in self.racks for n in (g.names or [])}
        out: list[tuple[str, RackGroup]] = []
        counter = 0
        for group in self.racks:
            if group.names is not None:
                out.extend((n, group) for n in group.names)
                continue
            for _ in range(group.rack_count):
                counter += 1
                while f"r{counter:02d}" in taken:
                    counter += 1
                out.append((f"r{counter:02d}", group))
        return out


class NetworkSpec(_Strict):
    racks_per_leaf: Annotated[int, Field(gt=0, le=MAX_RACKS_PER_LEAF)] = 2
    spines_per_region: Annotated[int, Field(gt=0, le=MAX_SPINES)] = 8


class FleetSpec(_Strict):
    version: int = 1
    name: Annotated[str, Field(pattern=FLEET_NAME, max_length=MAX_NAME)]
    regions: Annotated[list[RegionSpec], Field(min_length=1, max_length=MAX_REGIONS)]
    network: NetworkSpec = NetworkSpec()
    # The explicit override for a fleet beyond the design target (see DEFAULT_MAX_GPUS).
    max_gpus: Annotated[int, Field(gt=0, le=HARD_MAX_GPUS)] = DEFAULT_MAX_GPUS

    @property
    def gpu_count(self) -> int:
        """Headline GPUs, from the spec alone (before any topology is built)."""
        total = 0
        for region in self.regions:
            for g in region.racks:
                t = TEMPLATES[g.template]
                total += g.rack_count * (g.nodes_per_rack or t.trays) * t.gpus_per_tray
        return total

    @field_validator("version")
    @classmethod
    def _known_version(cls, v: int) -> int:
        if v != 1:
            raise ValueError(f"fleet spec version {v} is not supported; this rackscale reads 1")
        return v

    @model_validator(mode="after")
    def _unique_regions(self) -> FleetSpec:
        seen: set[str] = set()
        for r in self.regions:
            if r.name in seen:
                raise ValueError(f"region name {r.name!r} appears twice; region names are unique")
            seen.add(r.name)
        if self.name in seen:
            raise ValueError(f"fleet name {self.name!r} is also a region name; fleet events "
                             "would land on the region. Rename the fleet or the region")
        gpus = self.gpu_count
        if gpus > self.max_gpus:
            raise ValueError(
                f"the fleet has {gpus} GPUs, over the cap of {self.max_gpus} "
                f"(default {DEFAULT_MAX_GPUS}, the design target). If the size is intended, "
                f"add `max_gpus: {gpus}` to the spec (at most {HARD_MAX_GPUS})"
            )
        return self




def parse_fleet(text: str, filename: str = "<fleet>") -> FleetSpec:
    src = load_yaml(text, filename)
    return _validate_with_lines(src)


def load_fleet(path: str) -> FleetSpec:
    return _validate_with_lines(read_yaml(path, "fleet spec"))


def _validate_with_lines(src: YamlSource) -> FleetSpec:
    # Duplicate names are checked here too, before pydantic, so the error can point at the
    # exact line of the second occurrence rather than at the enclosing list.
    data = src.data
    if isinstance(data, dict) and isinstance(data.get("regions"), list):
        seen: dict[str, int] = {}
        for i, region in enumerate(data["regions"]):
            if not isinstance(region, dict) or not isinstance(region.get("name"), str):
                continue
            name = region["name"]
            if name in seen:
                raise SpecError(
                    f"{src.where(('regions', i, 'name'))}: regions[{i}].name: region {name!r} "
                    f"is already defined at regions[{seen[name]}]. Fix: give each region a "
                    "unique name, or merge the two entries."
                )
            seen[name] = i
            racks_seen: dict[str, tuple[int, int]] = {}
            for j, group in enumerate(region.get("racks") or []):
                if not isinstance(group, dict) or not isinstance(group.get("names"), list):
                    continue
                for k, rack in enumerate(group["names"]):
                    if rack in racks_seen:
                        raise SpecError(
                            f"{src.where(('regions', i, 'racks', j, 'names', k))}: "
                            f"regions[{i}].racks[{j}].names[{k}]: rack {rack!r} is already "
                            f"named in region {name!r}. Fix: give each rack a unique name."
                        )
                    racks_seen[rack] = (j, k)
    return validate(FleetSpec, src)


SEEDS: dict[str, str] = {
    "seed-504": """\
name: seed-504
regions:
  - name: us-east
    racks: [{template: vr-nvl72, count: 4}]
  - name: us-west
    racks: [{template: vr-nvl72, count: 3}]
""",
}


def seed_fleet(name: str = "seed-504") -> FleetSpec:
    if name not in SEEDS:
        raise SpecError(f"unknown seed fleet {name!r}; valid seeds: {', '.join(sorted(SEEDS))}")
    return parse_fleet(SEEDS[name], f"<seed {name}>")


def synthetic_fleet(racks: int, *, regions: int = 2, template: str = "vr-nvl72") -> FleetSpec:
    """A fleet of `racks` racks spread evenly over `regions` regions (benchmarks, the twin)."""
    if racks <= 0 or regions <= 0 or regions > racks:
        raise SpecError("synthetic fleet: need racks > 0 and 0 < regions <= racks")
    per, extra = divmod(racks, regions)
    return FleetSpec(
        name=f"synthetic-{racks}",
        regions=[
            RegionSpec(
                name=f"region-{i}",
                racks=[RackGroup(template=template, count=per + (1 if i < extra else 0))],
            )
            for i in range(regions)
        ],
    )
