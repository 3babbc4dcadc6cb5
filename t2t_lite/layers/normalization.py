"""Layer normalization (Ba et al., 2016), applied around every sub-layer (section 3.1)."""

import keras

from t2t_lite import kernels as kernel_sets
from t2t_lite.kernels import layer_norm


@keras.saving.register_keras_serializable(package="t2t_lite")
class LayerNorm(keras.layers.LayerNormalization):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis, in float32.

    `keras.layers.LayerNormalization`, whose weights, config and checkpoints it keeps,
    with a choice of kernel: "keras" runs Keras's code, "cpu" the same function with its
    gradient written out (`t2t_lite.kernels.layer_norm`) when it normalises over the last
    axis with gamma and beta.

    Args:
        kernels: "keras" or "cpu".
        **kwargs: those of `keras.layers.LayerNormalization` (`epsilon`, ...).
    """

    def __init__(self, kernels: str = kernel_sets.KERAS, **kwargs):
        super().__init__(**kwargs)
        self.kernels = kernel_sets.check(kernels, "LayerNorm")

    def call(self, inputs):
        if self.kernels == kernel_sets.CPU and layer_norm.applies(self, inputs):
            return layer_norm.layer_norm(
                inputs, self.gamma, self.beta, self.epsilon, self.compute_dtype
            )
        return super().call(inputs)

    def get_config(self):
        return {**super().get_config(), "kernels": self.kernels}
