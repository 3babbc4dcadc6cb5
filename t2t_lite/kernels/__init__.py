"""Kernel sets: how the model computes the paper's functions, chosen once per model.

- "keras": the plain Keras formulation, the layers' own code; any backend, any device.
- "cpu": the same functions written for TensorFlow's CPU kernels, one module each here
  (`layer_norm`, `dropout`, `projection`, `adam`, `cross_entropy`, `cache_write`). Equal to
  the Keras formulation up to float rounding (tests/test_layer_kernels.py; the cache write
  bit for bit); dropout draws other random masks with the same distribution.

The choice changes no variable: a checkpoint written with either set restores into a
model built with the other. `resolve` turns the hparam `kernels` ("auto", "cpu" or
"keras") into a set; models and the optimizer take the resolved name.
"""

from __future__ import annotations

import keras

KERAS = "keras"
CPU = "cpu"
KERNEL_SETS = (KERAS, CPU)
CHOICES = ("auto", *KERNEL_SETS)


def check(kernels: str, owner: str) -> str:
    """Returns `kernels` when it names a kernel set; raises ValueError naming `owner`."""
    if kernels not in KERNEL_SETS:
        raise ValueError(
            f"{owner}: kernels must be one of {', '.join(KERNEL_SETS)}, got {kernels!r} "
            "(resolve 'auto' with t2t_lite.kernels.resolve)"
        )
    return kernels


def resolve(choice: str, device_type: str | None = None) -> str:
    """The kernel set for the hparam value `choice` on `device_type` ("CPU", "GPU", "TPU").

    "auto" is "cpu" where the CPU kernels were measured faster: TensorFlow on CPUs
    (tools/benchmark_train.py `--configs=noxla:float32:cpu,noxla:float32:keras`). On GPUs
    and TPUs it is "keras": there the trainer compiles the step with XLA, which fuses the
    plain formulation's element-wise passes itself, while the CPU kernels' choices (one
    2-D product per projection, a written-out layer-norm gradient, 16-bit random draws,
    a fused Adam outside XLA) are tuned to TensorFlow's CPU kernels and were never
    measured on accelerators.

    Args:
        choice: "auto", "cpu" or "keras".
        device_type: the devices the model will run on; None reads them
            (`current_device_type()`).

    Returns:
        "cpu" or "keras".
    """
    if choice not in CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(CHOICES)}, got {choice!r}")
    if choice != "auto":
        return choice
    if keras.backend.backend() != "tensorflow":
        return KERAS
    return CPU if (device_type or current_device_type()) == "CPU" else KERAS


def current_device_type() -> str:
    """ "GPU", "TPU" or "CPU": what the current tf.distribute strategy computes on, or
    without one in scope, the machine's accelerators (`keras.distribution.list_devices`)."""
    devices = []
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if tf.distribute.has_strategy():
            devices = list(tf.distribute.get_strategy().extended.worker_devices)
    if not devices:
        devices = keras.distribution.list_devices()
    kinds = {_device_kind(device) for device in devices}
    for kind in ("TPU", "GPU"):
        if kind in kinds:
            return kind
    return "CPU"


def _device_kind(device: str) -> str:
    """ "GPU" of "/job:worker/replica:0/task:0/device:GPU:0" or of "gpu:0"."""
    parts = device.upper().replace("/DEVICE:", "/").split("/")[-1].split(":")
    return parts[0] if len(parts) > 1 else ""
