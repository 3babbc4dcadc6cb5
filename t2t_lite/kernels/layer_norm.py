"""CPU kernel of layer normalization over the last axis: its gradient written out.

Differentiating `keras.layers.LayerNormalization`'s formula makes about twice the
element-wise passes over [B, T, D] that the closed-form gradient needs, and each pass
is memory-bound on a CPU. With x_hat the normalised input, r = 1 / sqrt(var + eps) and
g = dy * gamma:
    dx = r (g - mean(g) - x_hat mean(g x_hat)),
    dgamma = sum over positions of dy x_hat,   dbeta = sum over positions of dy.
"""

from __future__ import annotations

import tensorflow as tf
from keras import ops


def applies(layer, inputs) -> bool:
    """Whether `layer` (a LayerNormalization) normalises `inputs` as this kernel does:
    over the last axis only, with both gamma and beta and without RMS scaling."""
    axes = [layer.axis] if isinstance(layer.axis, int) else list(layer.axis)
    last = (-1, len(inputs.shape) - 1)
    return (
        len(axes) == 1
        and axes[0] in last
        and layer.center
        and layer.scale
        and not layer.rms_scaling
    )


def layer_norm(inputs, gamma, beta, epsilon: float, compute_dtype: str):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis, in float32.

    Args:
        inputs: [..., C].
        gamma, beta: [C] variables or tensors.
        epsilon: added to the variance.
        compute_dtype: the dtype of the result.

    Returns:
        [..., C] in `compute_dtype`.
    """
    x = ops.cast(inputs, "float32")
    gamma = ops.cast(gamma, "float32")
    beta = ops.cast(beta, "float32")
    return ops.cast(_normalize(x, gamma, beta, epsilon), compute_dtype)


def _normalize(x, gamma, beta, epsilon):
    width = x.shape[-1]

    @ops.custom_gradient
    def normalize(x, gamma, beta):
        mean = ops.mean(x, axis=-1, keepdims=True)
        centred = x - mean
        rstd = ops.rsqrt(ops.mean(ops.square(centred), axis=-1, keepdims=True) + epsilon)
        x_hat = centred * rstd

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            g = upstream * gamma
            dx = rstd * (
                g
                - ops.mean(g, axis=-1, keepdims=True)
                - x_hat * ops.mean(g * x_hat, axis=-1, keepdims=True)
            )
            dgamma = position_sums(ops.reshape(upstream * x_hat, (-1, width)))
            dbeta = position_sums(ops.reshape(upstream, (-1, width)))
            return dx, dgamma, dbeta

        return x_hat * gamma + beta, grad

    return normalize(x, gamma, beta)


def position_sums(x):
    """[N, C] -> [C], summed over the N positions by TensorFlow's BiasAddGrad.

    One formulation for both kinds of step: outside XLA, BiasAddGrad is a kernel made
    for this sum (as fast as a ones-row matrix product, faster than the generic
    `sum(x, axis=0)`); XLA lowers it to a reduction, which it fuses with the product
    that feeds it, where it would compile a ones-row product as an unfused dot.
    """
    return tf.raw_ops.BiasAddGrad(out_backprop=x)
