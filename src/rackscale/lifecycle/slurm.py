"""Slurm: trays that leave production are drained, and resumed when they return.

Node names are derived from component ids deterministically: the tray id with `/` replaced by
`-` (`us-east/r01/c07` -> `us-east-r01-c07`; HGX `us-west/r02/n03` -> `us-west-r02-n03`). A
site's slurm.conf may carry the component id as a node feature. Only nodes Slurm knows are
managed, and only drains whose reason starts with `rackscale:` are ever resumed, so an
operator's own drain is never undone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Protocol, runtime_checkable

from rackscale.errors import UserError
from rackscale.fleet import slurm_node_name

REASON_PREFIX = "rackscale: "


class SlurmError(UserError):
    pass


def node_name(tray_id: str) -> str:
    return slurm_node_name(tray_id)  # the rule is the fleet's (certify's Slurm runner uses it)


@runtime_checkable
class SlurmControl(Protocol):
    def nodes(self) -> dict[str, str]:
        """Every node Slurm knows -> its drain reason ("" when not drained)."""
        ...

    def drain(self, nodes: list[str], reason: str) -> None: ...

    def resume(self, nodes: list[str]) -> None: ...


class SimSlurm:
    """An in-memory Slurm for simulations and benchmarks."""

    def __init__(self, names: list[str]) -> None:
        self.state: dict[str, str] = dict.fromkeys(names, "")
        self.commands: list[tuple[str, tuple[str, ...], str]] = []

    def nodes(self) -> dict[str, str]:
        return self.state

    def drain(self, nodes: list[str], reason: str) -> None:
        for n in nodes:
            self.state[n] = reason
        self.commands.append(("drain", tuple(nodes), reason))

    def resume(self, nodes: list[str]) -> None:
        for n in nodes:
            self.state[n] = ""
        self.commands.append(("resume", tuple(nodes), ""))


class ScontrolSlurm:
    """Real Slurm through `scontrol` (SLURM_CONF chooses the cluster)."""

    def __init__(self, *, conf: str | None = None, scontrol: str = "scontrol",
                 timeout_s: float = 30.0) -> None:
        path = shutil.which(scontrol)
        if path is None:
            raise SlurmError(f"{scontrol!r} not found on PATH; install slurm-wlm or drop --slurm")
        self.scontrol = path
        self.env = dict(os.environ)
        if conf:
            # scontrol retries a missing slurm.conf for 60 s before failing: say it now.
            if not os.path.isfile(conf):
                raise SlurmError(f"--slurm-conf {conf}: no such file; give the path of the "
                                 "cluster's slurm.conf")
            self.env["SLURM_CONF"] = conf
        self.timeout_s = timeout_s

    def _run(self, *args: str) -> str:
        try:
            proc = subprocess.run([self.scontrol, *args], env=self.env, capture_output=True,
                                  text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"scontrol {' '.join(args)} did not answer in {self.timeout_s:.0f} s "
                             f"(SLURM_CONF={self.env.get('SLURM_CONF', 'default')}); check that "
                             "slurmctld is running and reachable") from None
        if proc.returncode != 0:
            raise SlurmError(f"scontrol {' '.join(args)} failed ({proc.returncode}): "
                             f"{proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def nodes(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for line in self._run("-o", "show", "node").splitlines():
            fields = _fields(line)
            name = fields.get("NodeName")
            if not name:
                continue
            state = fields.get("State", "")
            drained = "DRAIN" in state.upper()
            out[name] = (fields.get("Reason", "") or "drained") if drained else ""
        return out

    def drain(self, nodes: list[str], reason: str) -> None:
        if nodes:
            self._run("update", f"nodename={','.join(nodes)}", "state=drain", f"reason={reason}")

    def resume(self, nodes: list[str]) -> None:
        if nodes:
            self._run("update", f"nodename={','.join(nodes)}", "state=resume")

    def reconfigure(self) -> None:
        """slurmctld re-reads its configuration files (topology.conf among them)."""
        self._run("reconfigure")


def _fields(line: str) -> dict[str, str]:
    """`scontrol -o show node` prints key=value pairs; Reason runs to `[user@time]` or the end
    and may hold spaces, so it is cut out before splitting."""
    out: dict[str, str] = {}
    reason = ""
    if " Reason=" in line:
        line, reason = line.split(" Reason=", 1)
        if " [" in reason:
            reason = reason[: reason.rindex(" [")]
        out["Reason"] = reason.strip()
    for tok in line.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            out[k] = v
    return out
