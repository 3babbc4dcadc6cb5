"""CPU kernel of the decoding cache's write: the step's key or value into its slot, in place.

A cached decoding step writes one position of every row and head into the self-attention
cache [N, H, L, Dh]. `TensorScatterUpdate`, the op behind `keras.ops.scatter_update`, copies
the whole cache on TensorFlow's CPU kernels even when nothing else holds it, so a search
step paid a full copy of every layer's cache for a write of one position (besides the
copy that reorders the cache by parent hypothesis). `ScatterNdNonAliasingAdd` takes over
its input's buffer when no other op holds it and adds the updates there; TensorFlow copies
the input first whenever it is shared, so no other reader ever sees the write. Adding
equals writing because a slot is still zeros until its step writes it: caches start as
zeros, grow with zeros, and reordering by parent moves whole rows.

XLA has no kernel for `ScatterNdNonAliasingAdd` and updates buffers in place itself, so
under XLA (and on other backends) the write stays `scatter_update`.
"""

from __future__ import annotations

import keras
from keras import ops


def write_slot(cache, slots, update):
    """`cache` with `update` at `slots`, where those positions of `cache` hold zeros.

    Args:
        cache: [N, H, L, Dh], zeros at every (n, h, slot) of `slots`.
        slots: int32 [N, H, 3], the (n, h, position) each update goes to.
        update: [N, H, Dh].

    Returns:
        [N, H, L, Dh]: equal to `ops.scatter_update(cache, slots, update)` bit for bit.
    """
    if keras.backend.backend() != "tensorflow" or _in_xla():
        return ops.scatter_update(cache, slots, update)
    import tensorflow as tf

    return tf.raw_ops.ScatterNdNonAliasingAdd(input=cache, indices=slots, updates=update)


def _in_xla() -> bool:
    """Whether the graph being traced is compiled by XLA (`tf.function(jit_compile=True)`)."""
    import tensorflow as tf

    if tf.executing_eagerly():
        return False
    # TensorFlow's own test of an XLA context (it marks jit_compile functions and their
    # loop bodies); there is no public equivalent. Should a release move it, the write
    # falls back to the scatter, which is right everywhere.
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
