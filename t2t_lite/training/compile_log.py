"""What the training step compiles: XLA where it pays, and a report of its compilations."""

from __future__ import annotations

import tensorflow as tf


def use_xla(jit_compile: bool | None, strategy) -> bool:
    """`jit_compile`, or when None, whether the strategy's devices are GPUs or TPUs."""
    if jit_compile is not None:
        return jit_compile
    try:
        devices = strategy.extended.worker_devices
    except (AttributeError, RuntimeError):  # the default strategy places ops by itself
        devices = [device.name for device in tf.config.list_logical_devices()]
    return any(":GPU:" in device.upper() or ":TPU:" in device.upper() for device in devices)


class CompileLog:
    """Reports the compilations of the training step: how many are possible, and when.

    Without XLA the step is traced once for any batch shape. With XLA it is compiled
    once per distinct (sentences, source, target) shape of a micro-batch, and the
    training pipeline pads inputs and targets to their length bucket's boundary, so
    there are at most as many shapes as buckets. The step records the shapes it has met
    in `TrainStep.seen_shapes` inside the graph; they are read at reports only.
    """

    def __init__(self, step_fns, xla: bool, buckets: int, printer):
        self.step_fns, self.xla, self.buckets, self.printer = step_fns, xla, buckets, printer
        self.reported = 0
        if xla:
            printer(
                f"train step: XLA, compiled once per batch shape: at most {buckets} shapes "
                "(one per length bucket; inputs and targets padded to its boundary)"
            )
        else:
            printer("train step: tf.function without XLA, traced once for all batch shapes")

    def first_update(self, seconds: float) -> None:
        """Prints the time of the first update of this run (tracing and compilation)."""
        self.reported = self.compiled()
        what = f"tracing and {self.reported} XLA compilation(s)" if self.xla else "tracing"
        self.printer(f"first update: {seconds:.1f} s, including {what}")

    def compiled(self) -> int:
        """Distinct micro-batch shapes met so far (each one XLA compilation)."""
        return int(self.step_fns.seen_shapes.value().shape[0]) if self.xla else 0

    def report(self) -> dict:
        """Prints the count when it grew since the last report; returns summary values."""
        if not self.xla:
            return {}
        count = self.compiled()
        if count > self.reported:
            self.reported = count
            self.printer(f"XLA: {count} of at most {self.buckets} batch shapes compiled so far")
        return {"xla_compilations": float(count)}
