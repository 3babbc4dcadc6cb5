"""Every private Keras attribute t2t_lite relies on, and nothing else.

Keras does not keep private attributes stable between releases. Each one is reached
only through this module, which checks it first and raises `KerasInternalsError`
naming the Keras version and the attribute when a release has moved it;
tests/test_layer_kernels.py exercises every one against the installed Keras.
"""

from __future__ import annotations

import keras

# The method TensorFlow-backend optimizers call in `apply` to sum the gradients over
# the replicas of a tf.distribute strategy before updating the variables.
GRADIENT_ALL_REDUCE = "_all_reduce_sum_gradients"
# Adam's index of a variable among those it was built on, and its slot lists.
VARIABLE_INDEX = "_get_variable_index"
ADAM_SLOTS = ("_momentums", "_velocities")


class KerasInternalsError(RuntimeError):
    """A private Keras attribute t2t_lite relies on is not where this module expects it."""


def _moved(owner: str, attribute: str, user: str) -> KerasInternalsError:
    return KerasInternalsError(
        f"Keras {keras.__version__}: {owner} has no attribute {attribute!r}, which {user} "
        "relies on (t2t_lite/kernels/keras_internals.py reads it); this Keras release "
        "moved it. Install the Keras version t2t_lite was tested with, or update that module"
    )


def skip_gradient_all_reduce(optimizer_class: type) -> type:
    """Class decorator: `optimizer_class.apply` takes its gradients as already summed
    over replicas (the caller sums them itself) instead of summing them again.

    Raises:
        KerasInternalsError: when the optimizer has no such summing step to replace
            (a step that was renamed would otherwise sum the gradients twice, silently).
    """
    if keras.backend.backend() == "tensorflow" and not callable(
        getattr(optimizer_class, GRADIENT_ALL_REDUCE, None)
    ):
        raise _moved(optimizer_class.__name__, GRADIENT_ALL_REDUCE, "TrainStep's own summing")

    def all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars

    setattr(optimizer_class, GRADIENT_ALL_REDUCE, all_reduce_sum_gradients)
    return optimizer_class


def adam_slots(optimizer, variable) -> tuple:
    """(m, v): the tf.Variables holding Adam's first and second moments of `variable`.

    Args:
        optimizer: a `keras.optimizers.Adam` built on `variable`.
        variable: one of the variables it updates.

    Raises:
        KerasInternalsError: when Adam's slots are not where this Keras was expected
            to keep them.
    """
    owner = type(optimizer).__name__
    user = "the fused Adam update (kernels=cpu)"
    for attribute in (VARIABLE_INDEX, *ADAM_SLOTS):
        if not hasattr(optimizer, attribute):
            raise _moved(owner, attribute, user)
    index = getattr(optimizer, VARIABLE_INDEX)(variable)
    slots = []
    for attribute in ADAM_SLOTS:
        slot = getattr(optimizer, attribute)[index]
        # The backend's variable behind the keras.Variable: a tf.Variable with a handle.
        value = getattr(slot, "value", None)
        if not hasattr(value, "handle"):
            raise _moved(f"{owner}.{attribute}[{index}].value", "handle", user)
        slots.append(value)
    return tuple(slots)
