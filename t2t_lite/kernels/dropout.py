"""CPU kernel of dropout: one 32-bit random draw per two units.

Generating the random numbers is most of dropout's cost on a CPU. Each 32-bit draw is
split into two 16-bit uniform integers u, and a unit is kept when
u >= round(rate * 65536). Outputs are scaled by 65536 / (65536 - that threshold), so
that E[output] = input exactly for the drop probability actually used (rate 0.1 drops
with probability 6554 / 65536 = 0.100006).
"""

from __future__ import annotations

import keras
from keras import ops

# Drop probabilities are resolved to 1/65536.
LEVELS = 65536


def applies(rate: float, noise_shape, inputs) -> bool:
    """Whether this kernel can drop units of `inputs` at `rate`: no `noise_shape`, an
    even, known last dimension, and a rate that does not round to 0 or 1 in 1/65536."""
    width = inputs.shape[-1]
    threshold = round(rate * LEVELS)
    return noise_shape is None and width is not None and width % 2 == 0 and 0 < threshold < LEVELS


def dropout(inputs, rate: float, seed_generator):
    """`inputs` with each unit zeroed with probability round(rate * 65536) / 65536 and
    the others scaled to keep the expectation (module docstring).

    Args:
        inputs: [..., W] with W even (see `applies`).
        rate: the drop probability.
        seed_generator: the `keras.random.SeedGenerator` that draws the mask.

    Returns:
        [..., W] in the dtype of `inputs`.
    """
    threshold = round(rate * LEVELS)
    shape = ops.shape(inputs)
    bits = keras.random.randint(
        (*shape[:-1], inputs.shape[-1] // 2), -(2**31), 2**31 - 1, dtype="int32",
        seed=seed_generator,
    )  # fmt: skip
    keep = ops.view(bits, "uint16") >= ops.cast(threshold, "uint16")  # [..., W]
    scale = LEVELS / (LEVELS - threshold)
    return inputs * (ops.cast(keep, inputs.dtype) * ops.cast(scale, inputs.dtype))
