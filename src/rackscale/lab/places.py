"""Where each GPU's rank of the lab runs: the command prefix that puts a process into the
rank's cgroups and network namespace, and its interfaces per fabric. Plain data (the runners
of `certify` turn it into their placement; the lab does not import them)."""

from __future__ import annotations

from typing import Any

from rackscale.lab import system as sysops
from rackscale.lab.build import STANDBY_CGROUP, cg_top
from rackscale.lab.plan import NV_IF, SO_IF, LabPlan, RankPlan

# The rank's cgroup directories, for a warm standby to join when its rank arrives.
RANK_CGROUPS_ENV = "RACKSCALE_RANK_CGROUPS"


def launch_prefix(plan: LabPlan, r: RankPlan) -> list[str]:
    """`sh -c ... rank CMD...`: join the rank's cgroups, then run CMD in its namespace.
    The shell forks CMD (it is not the last command), so a rank whose cgroup admits no new
    process (gpu_dead) fails right there: "Cannot fork". A warm standby (`RACKSCALE_WARM`
    set) waits in the lab's standby cgroup instead and is told its rank's (a lab built
    before that cgroup existed keeps standbys in the rank's own). The forked CMD is told to
    die with the shell (`setpriv --pdeathsig`), as the shell dies with its starter: a
    supervisor killed with -9 leaves no rank or standby, even one still importing."""
    cg = sysops.cgroups()
    dirs = " ".join(str(d) for d in cg.dirs(f"{cg_top(plan.lab_id)}/{r.cgroup}"))
    standby = [str(d) for d in cg.dirs(f"{cg_top(plan.lab_id)}/{STANDBY_CGROUP}")]
    script = (f'J="{dirs}"; if [ -n "${{RACKSCALE_WARM:-}}" ] && [ -d "{standby[0]}" ]; '
              f'then J="{" ".join(standby)}"; fi; '
              'for d in $J; do echo $$ > "$d/cgroup.procs" || exit 97; done; '
              f'{RANK_CGROUPS_ENV}="{dirs}" setpriv --pdeathsig KILL ip netns exec {r.netns} '
              f'env GLOO_SOCKET_IFNAME={SO_IF} "$@"; exit $?')
    return ["sh", "-c", script, "rank"]


def rank_places(plan: LabPlan) -> dict[str, dict[str, Any]]:
    return {r.gpu: {"launch": launch_prefix(plan, r), "nominal_cpu": plan.cpu_base,
                    "fabrics": {"nvlink": [NV_IF, r.nv_addr], "scaleout": [SO_IF, r.so_addr]}}
            for r in plan.ranks}
