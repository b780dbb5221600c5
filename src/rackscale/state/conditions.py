"""Conditions: what is true of one part now, each resting on one event of the log.

In the manner of Kubernetes node conditions, a part (a tray or HGX node, a rack) carries a
small set of conditions, one per type; each has a status (true, false, unknown), a reason code,
a message for people, the seq of the event that set it and the time of that event. A newer
event of the same type replaces the condition: the newest evidence wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any


class ConditionType(StrEnum):
    """The questions the fleet state answers about a part."""

    # The newest certification evidence of the part: its own certify.result, a rack's result
    # where the run said nothing of the tray, or a failing finding on a part it holds.
    CERTIFIED = "Certified"
    # The shared network under a rack: false while a failing finding on a leaf or spine its
    # GPUs route through is newer than the rack's last passing certification.
    FABRIC = "FabricHealthy"
    # The rack's CDU in the digital twin's plant: false while the plant carries a
    # coolant_flow_low fault on it (a simulated reading).
    COOLING = "CoolantFlow"
    # The rack's power shelves in the twin's plant: false while one is down (simulated).
    POWER = "PowerShelves"


class Status(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True, kw_only=True)
class Condition:
    """One condition of one part. `run_id` names the certification run the evidence came
    from (None for plant conditions); `seq` is the event that set it."""

    type: ConditionType
    status: Status
    reason: str
    message: str
    seq: int
    since: datetime
    run_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.status is Status.TRUE

    def as_dict(self) -> dict[str, Any]:
        return {"type": self.type.value, "status": self.status.value, "reason": self.reason,
                "message": self.message, "seq": self.seq, "since": self.since.isoformat(),
                "run_id": self.run_id}
