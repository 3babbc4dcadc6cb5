"""Dropout (section 5.4, Residual Dropout) with a choice of kernel for its random mask."""

import keras

from t2t_lite import kernels as kernel_sets
from t2t_lite.kernels import dropout


@keras.saving.register_keras_serializable(package="t2t_lite")
class Dropout(keras.layers.Dropout):
    """`keras.layers.Dropout`, whose seed generator, config and state it keeps.

    With `kernels="cpu"` the training-time mask comes from `t2t_lite.kernels.dropout`
    (16-bit uniform draws, half the random numbers) where it applies; otherwise, and
    always with "keras", from Keras's code.

    Args:
        kernels: "keras" or "cpu".
        **kwargs: those of `keras.layers.Dropout` (`rate`, `noise_shape`, `seed`, ...).
    """

    def __init__(self, *args, kernels: str = kernel_sets.KERAS, **kwargs):
        super().__init__(*args, **kwargs)
        self.kernels = kernel_sets.check(kernels, "Dropout")

    def call(self, inputs, training=False):
        if (
            training
            and self.kernels == kernel_sets.CPU
            and dropout.applies(self.rate, self.noise_shape, inputs)
        ):
            return dropout.dropout(inputs, self.rate, self.seed_generator)
        return super().call(inputs, training=training)

    def get_config(self):
        return {**super().get_config(), "kernels": self.kernels}
