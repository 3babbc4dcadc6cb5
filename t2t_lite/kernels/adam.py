"""CPU kernel of Adam's update: TensorFlow's fused ApplyAdam, one pass per variable.

Keras spells the update as about ten element-wise ops, each a pass over the variable
and its moments; the fused kernel reads and writes each once. Same formula:
m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2), w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps).
"""

from __future__ import annotations

import tensorflow as tf

from t2t_lite.kernels import keras_internals


def applies(optimizer, gradient) -> bool:
    """Whether the fused kernel computes `optimizer`'s update: dense gradients, no AMSGrad."""
    return not optimizer.amsgrad and not isinstance(gradient, tf.IndexedSlices)


def update(optimizer, gradient, variable, learning_rate) -> None:
    """Applies Adam's update of `variable` in place, as `optimizer.update_step` would.

    Args:
        optimizer: a built `keras.optimizers.Adam` (its betas, epsilon, step and moments).
        gradient: the dense gradient of `variable`.
        variable: the tf.Variable to update.
        learning_rate: this step's rate.
    """
    m, v = keras_internals.adam_slots(optimizer, variable)
    dtype = variable.dtype
    step = tf.cast(optimizer.iterations + 1, dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle,
        m=m.handle,
        v=v.handle,
        beta1_power=tf.pow(tf.cast(optimizer.beta_1, dtype), step),
        beta2_power=tf.pow(tf.cast(optimizer.beta_2, dtype), step),
        lr=tf.cast(learning_rate, dtype),
        beta1=tf.cast(optimizer.beta_1, dtype),
        beta2=tf.cast(optimizer.beta_2, dtype),
        epsilon=tf.cast(optimizer.epsilon, dtype),
        grad=tf.cast(gradient, dtype),
    )
