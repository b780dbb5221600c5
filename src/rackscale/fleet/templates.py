"""Rack templates as data: what one rack of each kind holds.

Two shapes exist. An NVL72 rack is one NVLink domain: 18 compute trays (`c01..c18`) of 4 GPUs
and 9 NVLink switch trays (`s01..s09`). An HGX rack holds 8-GPU nodes (`n01..`), each its own
NVLink domain through NVSwitch chips on the baseboard; how many nodes a rack holds is set per
rack group in the fleet spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rackscale.fleet.hardware import GPUS, NICS, PARTS
from rackscale.fleet.kinds import COMPUTE_TRAY, NODE, NVSWITCH, SWITCH_TRAY
from rackscale.registry import Registry, UnknownName

Shape = Literal["nvl72", "hgx"]
DEFAULT_MAX_BAD_TRAYS = 2  # see RackTemplate.max_bad_trays


@dataclass(frozen=True, slots=True, kw_only=True)
class RackTemplate:
    name: str
    shape: Shape
    gpu: str
    cpu: str
    nic: str
    dpu: str
    switch: str  # switch tray SKU (nvl72) or NVSwitch chip SKU (hgx)
    trays: int  # compute trays (nvl72) or default nodes per rack (hgx)
    gpus_per_tray: int
    cpus_per_tray: int
    nics_per_tray: int  # one scale-out NIC per GPU: nic k serves gpu k and joins rail k
    dpus_per_tray: int
    switches: int  # switch trays per rack (nvl72) or NVSwitch chips per node (hgx)
    power_shelves: int
    # Rack IT power drawn at full load, kW: sizes the coolant flow the CDU must prove before
    # power-on (about 1.43 L/min per kW at a 10 K rise, docs/figures.md).
    rack_power_kw: float
    source: str
    # Trays (or nodes) out of service a rack may have and still be promoted to production
    # (degraded when any is out). An NVL72 job spans the rack's one NVLink domain and runs with
    # up to 2 trays out; with `cordon_on_bad_trays`, more than that drains the whole rack for
    # repair. HGX nodes are their own domains: a bad node never cordons its rack.
    max_bad_trays: int = DEFAULT_MAX_BAD_TRAYS
    cordon_on_bad_trays: bool = False

    def __post_init__(self) -> None:
        for field, table in (("gpu", GPUS), ("nic", NICS), ("cpu", PARTS), ("dpu", PARTS)):
            value = getattr(self, field)
            if value not in table:
                raise ValueError(f"template {self.name}: unknown {field} SKU {value!r}")
        if self.nics_per_tray != self.gpus_per_tray:
            raise ValueError(f"template {self.name}: rails need one NIC per GPU")

    # What the shape means, said once here; rooms ask these instead of testing the shape.
    @property
    def domain_is_rack(self) -> bool:
        """One NVLink domain spans the whole rack (NVL72); else each node is one (HGX)."""
        return self.shape == "nvl72"

    @property
    def tray_kind(self) -> str:
        return COMPUTE_TRAY if self.domain_is_rack else NODE

    @property
    def switch_kind(self) -> str:
        """NVLink switch trays on the rack (NVL72), or NVSwitch chips on each node (HGX)."""
        return SWITCH_TRAY if self.domain_is_rack else NVSWITCH

    @property
    def nodes_per_rack_varies(self) -> bool:
        """Whether a fleet spec may set how many nodes a rack holds (HGX); NVL72 is fixed."""
        return not self.domain_is_rack

    @property
    def whole_domain_shape(self) -> str:
        """The name of the job shape that fills one whole NVLink domain of this template: the
        pool's headline shape (a rack of NVL72, a node of HGX)."""
        return f"whole-{self.shape}-domains" if self.domain_is_rack else f"whole-{self.shape}-nodes"

    def tray_prefix(self) -> str:
        return "c" if self.tray_kind == COMPUTE_TRAY else "n"


def _nvl72(name: str, *, gpu: str, cpu: str, nic: str, dpu: str, switch: str, kw: float,
           shelves: int, source: str) -> RackTemplate:
    return RackTemplate(
        name=name, shape="nvl72", gpu=gpu, cpu=cpu, nic=nic, dpu=dpu, switch=switch, trays=18,
        gpus_per_tray=4, cpus_per_tray=2, nics_per_tray=4, dpus_per_tray=2, switches=9,
        power_shelves=shelves, rack_power_kw=kw, source=source, cordon_on_bad_trays=True,
    )


def _hgx(name: str, *, gpu: str, switch: str, switches: int, node_kw: float,
         source: str) -> RackTemplate:
    return RackTemplate(
        name=name, shape="hgx", gpu=gpu, cpu="x86-host", nic="cx7", dpu="bf3", switch=switch,
        trays=4, gpus_per_tray=8, cpus_per_tray=2, nics_per_tray=8, dpus_per_tray=1,
        switches=switches, power_shelves=2, rack_power_kw=node_kw * 4, source=source,
    )


class UnknownTemplate(UnknownName):
    pass


TEMPLATES: Registry[RackTemplate] = Registry(
    "rack template", plural="templates", error=UnknownTemplate, sort_names=True)
for _t in (
    # Rack power for VR NVL72 is unverified (secondary sources: 120-230 kW); 190 kW is an
    # estimate chosen inside that range.
    _nvl72("vr-nvl72", gpu="rubin", cpu="vera", nic="cx9", dpu="bf4",
           switch="nvlink6-switch-tray", kw=190.0, shelves=8,
           source="Vera Rubin NVL72 (docs/figures.md); rack power estimated"),
    _nvl72("gb200-nvl72", gpu="gb200", cpu="grace", nic="cx7", dpu="bf3",
           switch="nvlink5-switch-tray", kw=120.0, shelves=8,
           source="DGX SuperPOD GB200 reference architecture (docs/figures.md)"),
    _nvl72("gb300-nvl72", gpu="gb300", cpu="grace", nic="cx8", dpu="bf3",
           switch="nvlink5-switch-tray", kw=142.0, shelves=8,
           source="NVIDIA enterprise reference architecture: 8 x 33 kW shelves, ~142 kW"),
    # HGX node power: ~10.2 kW (H100/H200), ~14.3 kW (B200) per DGX system specs.
    _hgx("hgx-h100", gpu="h100-sxm", switch="nvswitch-gen3", switches=4, node_kw=10.2,
         source="NVIDIA DGX H100 (secondary)"),
    _hgx("hgx-h200", gpu="h200-sxm", switch="nvswitch-gen3", switches=4, node_kw=10.2,
         source="NVIDIA DGX H200 (secondary)"),
    _hgx("hgx-b200", gpu="b200", switch="nvswitch-gen4", switches=2, node_kw=14.3,
         source="NVIDIA DGX B200 user guide (secondary)"),
    # The miniature rack `rackscale lab` builds on one Linux host: 2 trays of 2 CPU ranks,
    # 2 rails, one NVLink bridge (s01) per rack. Power is nominal (no real draw).
    RackTemplate(
        name="lab-mini", shape="nvl72", gpu="lab-rank", cpu="lab-cpu", nic="lab-veth",
        dpu="lab-dpu", switch="lab-bridge", trays=2, gpus_per_tray=2, cpus_per_tray=1,
        nics_per_tray=2, dpus_per_tray=0, switches=1, power_shelves=1, rack_power_kw=0.1,
        source="rackscale lab (namespaces, veths, bridges, tc)",
        cordon_on_bad_trays=True,  # one NVLink domain per rack, as on a real NVL72
    ),
):
    TEMPLATES.add(_t.name, _t)


def get_template(name: str) -> RackTemplate:
    return TEMPLATES[name]
