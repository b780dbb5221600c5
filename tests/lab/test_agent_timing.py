"""The rank agent's all-reduce figure is the median of its timed iterations: one iteration
that waited for a core (a shared host) must not read as a slow link, while a link slow in
every iteration still does. Real agent and a real TCP store; the process group is replaced by
one whose all-reduce takes the time the test says (a fake beside the lab's real rings)."""

from __future__ import annotations

import time

from lab_rig import torch_missing
from tests.needs import require

from rackscale.certify.runners.local import free_port

require(torch_missing())


class _Done:
    def wait(self) -> None:
        return None


class _TimedGroup:
    """An all-reduce of world 1 that sleeps `delays[k]` on its k-th call."""

    def __init__(self, delays: list[float]) -> None:
        self.delays, self.calls = delays, 0

    def allreduce(self, bufs):  # type: ignore[no-untyped-def]
        time.sleep(self.delays[min(self.calls, len(self.delays) - 1)])
        self.calls += 1
        return _Done()

    def barrier(self) -> _Done:
        return _Done()


def _seconds(delays: list[float]) -> float:
    from rackscale.certify.runners.agent import Agent
    agent = Agent()
    group = _TimedGroup(delays)
    agent._group = lambda *a, **k: group  # type: ignore[method-assign]
    reply = agent.allreduce({"timeout_s": 5, "store_host": "127.0.0.1",
                             "store_port": free_port(), "world": 1, "rank": 0, "tag": "t",
                             "nbytes": 4096, "warmup": 1, "iters": 3, "iface": "lo"})
    assert reply["result_ok"] and len(reply["iter_seconds"]) == 3
    return float(reply["seconds"])


def test_one_stalled_iteration_does_not_set_the_figure() -> None:
    # warmup, then iterations of 0.02, 0.5 (a stall) and 0.02 s: the figure is ~0.02 s
    assert _seconds([0.0, 0.02, 0.5, 0.02]) < 0.1


def test_a_link_slow_in_every_iteration_sets_the_figure() -> None:
    assert _seconds([0.0, 0.2, 0.2, 0.2]) >= 0.19
