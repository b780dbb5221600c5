"""The soak: a supervised training job on the lab under a fault schedule drawn from the
simulator's failure model, the faults injected for real and lifted after their repair time;
its ETTR, goodput and badput by cause measured on the run (`rackscale job soak`).

This room sits above the ones it joins: the lab (faults), the supervisor (the job, as its own
process) and the simulator (the failure model, and the prediction of each soak's ETTR that
checks it); it records its result in the store.
"""

from rackscale.soak.families import FAMILIES, RECOVERY_STEPS, by_family, family_of, step_cells
from rackscale.soak.measure import BADPUT_CAUSES, figures
from rackscale.soak.predict import PredictError, differing, prediction, verdict
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

# `predict` itself is reached as rackscale.soak.predict.predict: a name of its own here would
# shadow its module.
__all__ = ["BADPUT_CAUSES", "FAMILIES", "LAB_ACTIONS", "RECOVERY_STEPS", "LabAction",
           "PredictError", "Schedule", "ScheduleError", "ScheduledFault", "Soak", "SoakError",
           "SoakSettings", "by_family", "differing", "draw", "family_of", "figures",
           "from_dict", "prediction", "record_soak", "step_cells", "trainer_command",
           "verdict"]
