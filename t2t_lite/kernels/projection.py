"""CPU kernel of a position-wise projection: one 2-D matrix product over all B x T positions.

Given [B, T, ...] inputs with static shapes, Keras lowers an `EinsumDense` such as
"btd,dhk->bthk" to a batched product, whose weight gradient TensorFlow computes as B
per-sentence products summed afterwards, and the gradient of an [H, Dh] bias as a sum
over two axes. Written as [B*T, n_in] x [n_in, n_out] plus a vector bias, the weight
gradient is one product over all positions and the bias gradient a sum over one axis,
the shapes TensorFlow's CPU kernels are made for.
"""

from __future__ import annotations

import math

from keras import ops


def positionwise(dense, x):
    """Applies `dense`, an EinsumDense over [B, T, ...], to all B x T positions at once.

    The same function as `dense(x)`: the kernel viewed as [n_in, n_out] (n_in, n_out the
    products of the einsum's input and output feature axes), the bias as a vector.

    Args:
        dense: a built EinsumDense whose equation starts with "bt" for x's first two
            axes, whose other input axes are all contracted, and whose bias spans every
            output feature axis.
        x: [B, T, ...].

    Returns:
        [B, T, ...] the projection of every position, in `dense`'s compute dtype.
    """
    batch, length = ops.shape(x)[0], ops.shape(x)[1]
    kernel = ops.cast(dense.kernel, dense.compute_dtype)
    in_axes = len(x.shape) - 2
    inputs = math.prod(kernel.shape[:in_axes])
    out_shape = tuple(kernel.shape[in_axes:])
    flat = ops.reshape(ops.cast(x, dense.compute_dtype), (-1, inputs))  # [B*T, n_in]
    projected = ops.matmul(flat, ops.reshape(kernel, (inputs, -1)))  # [B*T, n_out]
    bias = ops.cast(dense.bias, dense.compute_dtype)
    projected = ops.add(projected, ops.reshape(bias, (-1,)))
    return ops.reshape(projected, (batch, length, *out_shape))  # [B, T, ...]
