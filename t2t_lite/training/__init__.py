"""Training: the schedule, the loss, the distributed step, the run loop, checkpoint averaging,
the best checkpoint and early stopping."""

from t2t_lite.training.averaging import average_last_checkpoints
from t2t_lite.training.schedule import TransformerSchedule

__all__ = ["TransformerSchedule", "average_last_checkpoints"]
