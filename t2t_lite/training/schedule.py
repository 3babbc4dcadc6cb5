"""The learning-rate schedule of the paper (eq. 3)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="t2t_lite")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)  (eq. 3).

    Linear warmup for `warmup_steps` updates, then decay with the inverse square root
    of the step. Step 0 is evaluated as step 1, so the rate is never zero or infinite.

    Args:
        d_model: the model width D.
        warmup_steps: the paper uses 4000.
        scale: a constant multiplier (1.0 in the paper).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        warmup = float(self.warmup_steps)
        rate = ops.minimum(ops.rsqrt(step), step * warmup**-1.5)
        return self.scale * float(self.d_model) ** -0.5 * rate

    def get_config(self) -> dict:
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}
