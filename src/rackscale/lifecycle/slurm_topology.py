"""Slurm's topology.conf kept in step with the fleet while the controller runs.

`lifecycle run --slurm-conf FILE` asks `TopologySync.sync` once per pass. The file lives beside
slurm.conf (Slurm reads it from there) and is for the plugin slurm.conf's `TopologyPlugin`
names (`topology/tree` or `topology/block`); with no such plugin there is nothing to keep.
It is rendered from the fleet loaded in the store (`rackscale fleet load` of a changed spec
adds, removes or replaces racks) less the racks the lifecycle retired; a drained tray stays
(a drain is a node state, not a change of the network). When the text differs from the
file, the file is replaced atomically and slurmctld is told (`scontrol reconfigure`).

A topology.conf rackscale did not write (its first line is not rackscale's header) is the
site's own: it is left as it is, and the first pass says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from rackscale.durable import write_atomic
from rackscale.fleet import TOPOLOGY_CONF_HEADER, TOPOLOGY_PLUGINS, Topology, render_topology_conf
from rackscale.lifecycle.repository import LifecycleRow, open_store
from rackscale.lifecycle.slurm import ScontrolSlurm, SlurmError
from rackscale.lifecycle.states import RACK, RackState
from rackscale.store import Store, loaded_spec

_PLUGIN_LINE = re.compile(r"^\s*topologyplugin\s*=\s*(\S+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class TopologyChange:
    """What one sync did: `written` (the file was replaced and slurmctld reconfigured) or
    only `message` (why nothing is kept, said once)."""

    written: bool
    message: str
    racks: int = 0
    nodes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"written": self.written, "message": self.message, "racks": self.racks,
                "nodes": self.nodes}


def topology_plugin(slurm_conf: Path) -> str | None:
    """The topology plugin slurm.conf names (`tree`, `block`), else None (the last line
    that sets it wins, as in Slurm)."""
    plugin = None
    for line in slurm_conf.read_text(encoding="utf-8").splitlines():
        m = _PLUGIN_LINE.match(line.split("#", 1)[0])
        if m is not None:
            plugin = m.group(1).lower().removeprefix("topology/")
    return plugin if plugin in TOPOLOGY_PLUGINS else None


def retired_racks(store: Store) -> set[str]:
    q = select(LifecycleRow.component_id).where(LifecycleRow.machine == RACK,
                                                LifecycleRow.state == RackState.RETIRED.value)
    with open_store(store).session() as s:
        return set(s.scalars(q))


class TopologySync:
    """Keeps `<dir of slurm.conf>/topology.conf` equal to the fleet (see the module)."""

    def __init__(self, store: Store, slurm: ScontrolSlurm, slurm_conf: str) -> None:
        self.store = store
        self.slurm = slurm
        conf = Path(slurm_conf)
        self.path = conf.parent / "topology.conf"
        self.plugin = topology_plugin(conf)
        self._said = False
        self._last: tuple[str, frozenset[str]] | None = None
        self._unapplied = False  # written, but `scontrol reconfigure` failed

    def _once(self, message: str) -> TopologyChange | None:
        if self._said:
            return None
        self._said = True
        return TopologyChange(written=False, message=message)

    def sync(self) -> TopologyChange | None:
        """Rewrite the file and reconfigure slurmctld when the fleet's topology changed;
        None when nothing did (nor needs saying)."""
        if self.plugin is None:
            return self._once("slurm.conf names no TopologyPlugin=topology/tree or "
                              "topology/block: topology.conf is not kept")
        if self.path.exists() and not self.path.read_text(encoding="utf-8").startswith(
                TOPOLOGY_CONF_HEADER):
            return self._once(f"{self.path} was not written by rackscale: left as it is "
                              "(move it aside to have rackscale keep it)")
        spec = loaded_spec(self.store)
        if spec is None:
            return None
        retired = frozenset(retired_racks(self.store))
        key = (spec.model_dump_json(), retired)
        if key == self._last:
            return None  # the same fleet as last pass: no topology to build
        topo = Topology.build(spec)
        text = render_topology_conf(topo, self.plugin, leave_out=retired)
        on_disk = self.path.read_text(encoding="utf-8") if self.path.exists() else None
        if on_disk == text and not self._unapplied:
            self._last = key
            return None
        if on_disk != text:
            write_atomic(self.path, text)
        racks = [r for r in topo.racks if r.id not in retired]
        what = (f"{self.path} rewritten for fleet {spec.name} ({len(racks)} racks, plugin "
                f"{self.plugin})")
        try:
            self.slurm.reconfigure()
        except SlurmError as err:
            # The file is right; slurmctld has not read it. Asked again next pass.
            self._unapplied = True
            return TopologyChange(written=True, racks=len(racks),
                                  nodes=sum(r.trays for r in racks),
                                  message=f"{what}; slurmctld not reconfigured ({err}): "
                                          "retried next pass")
        self._unapplied = False
        self._last = key
        return TopologyChange(written=True, racks=len(racks), nodes=sum(r.trays for r in racks),
                              message=f"{what}; slurmctld reconfigured")


def topology_sync(store: Store, slurm_conf: str) -> TopologySync:
    """The sync for `lifecycle run --slurm-conf` (its own `scontrol`, the same cluster)."""
    return TopologySync(store, ScontrolSlurm(conf=slurm_conf), slurm_conf)
