"""Training: the schedule, the loss, the distributed step and the run loop."""

from t2t_lite.training.schedule import TransformerSchedule

__all__ = ["TransformerSchedule"]
