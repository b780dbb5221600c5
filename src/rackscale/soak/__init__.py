"""The soak: a supervised training job on the lab under a fault schedule drawn from the
simulator's failure model, the faults injected for real and lifted after their repair time;
its ETTR, goodput and badput by cause measured on the run (`rackscale job soak`).

This room sits above the ones it joins: the lab (faults), the supervisor (the job, as its own
process) and the simulator (the failure model); it records its result in the store.
"""

from rackscale.soak.measure import BADPUT_CAUSES, figures
from rackscale.soak.record import record_soak
from rackscale.soak.run import Soak, SoakError, SoakSettings, trainer_command
from rackscale.soak.schedule import (
    LAB_ACTIONS,
    LabAction,
    Schedule,
    ScheduledFault,
    ScheduleError,
    draw,
    from_dict,
)

__all__ = ["BADPUT_CAUSES", "LAB_ACTIONS", "LabAction", "Schedule", "ScheduleError",
           "ScheduledFault", "Soak", "SoakError", "SoakSettings", "draw", "figures",
           "from_dict", "record_soak", "trainer_command"]
