"""The learning-rate schedule of the paper (eq. 3), with an optional linear cooldown."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3).

    Linear warmup for `warmup_steps` updates, then decay with the inverse square root
    of the step. Step 0 is evaluated as step 1, so the rate is never zero or infinite.

    With `cooldown_steps` > 0 the rate of the last `cooldown_steps` updates before
    `total_steps` is also multiplied by (total_steps - step) / cooldown_steps, a line down
    towards zero: the last update (step total_steps - 1) gets 1 / cooldown_steps of eq. 3.
    Annealing the rate so lets a short run settle where eq. 3 alone still takes large steps.

    Args:
        d_model: the model width D.
        warmup_steps: the paper uses 4000.
        scale: a constant multiplier (1.0 in the paper).
        total_steps: the run's updates (its train_steps); used only with a cooldown.
        cooldown_steps: updates of the cooldown; 0 (the paper) for none.
    """

    def __init__(
        self,
        d_model: int,
        warmup_steps: int = 4000,
        scale: float = 1.0,
        total_steps: int = 0,
        cooldown_steps: int = 0,
    ):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.total_steps = total_steps
        self.cooldown_steps = cooldown_steps

    def __call__(self, step):
        step = ops.cast(step, "float32")
        clamped = ops.maximum(step, 1.0)
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(clamped), clamped * warmup**-1.5)
        rate = self.scale * float(self.d_model) ** -0.5 * rate
        if self.cooldown_steps > 0:
            remaining = (float(self.total_steps) - step) / float(self.cooldown_steps)
            rate = rate * ops.clip(remaining, 0.0, 1.0)
        return rate

    def get_config(self) -> dict:
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "total_steps": self.total_steps,
            "cooldown_steps": self.cooldown_steps,
        }
