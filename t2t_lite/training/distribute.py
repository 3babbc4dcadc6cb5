"""Choosing a tf.distribute strategy from flags.

- "auto": MultiWorkerMirroredStrategy when TF_CONFIG names a cluster, MirroredStrategy
  when more than one GPU is visible (or `num_gpus` > 1, or `cpu_replicas` > 1),
  otherwise the default strategy.
- "one_device", "mirrored", "multi_worker", "tpu": that strategy.
`cpu_replicas` > 1 splits the CPU into that many logical devices and mirrors over
them: the same code path as several GPUs, runnable on any machine (tests use it).
Logical CPU devices share the host's memory, so their gradients are summed on the first
of them and read from there by the others (`tf.distribute.ReductionToOneDevice`), not by
the ring collective MirroredStrategy picks for CPUs, which packs every gradient into one
buffer and splits the sum out again, which takes more than twice as long for
transformer_base's 63M gradients (tools/benchmark_train.py times both with
`--cpu_replicas`; docs/benchmarks.md).

MultiWorkerMirroredStrategy configures collective ops, which TensorFlow allows only
before its runtime has started; `make_strategy` therefore creates it before touching
any device, and must be called before any other TensorFlow work in the process.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")


class StrategyError(ValueError):
    """The strategy the flags ask for cannot be set up here; the message says what to change."""


def _has_cluster() -> bool:
    config = os.environ.get("TF_CONFIG")
    if not config:
        return False
    try:
        cluster = json.loads(config).get("cluster", {})
    except json.JSONDecodeError as error:
        raise StrategyError(f"TF_CONFIG is not valid JSON: {error}") from None
    return sum(len(tasks) for tasks in cluster.values()) > 1


def split_cpu(replicas: int) -> list:
    """Splits the physical CPU into `replicas` logical devices; returns their names."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(replicas)]
        )
    except RuntimeError:
        # Devices were initialised already; use them if they suffice.
        pass
    devices = [device.name for device in tf.config.list_logical_devices("CPU")]
    if len(devices) < replicas:
        raise StrategyError(
            f"asked for {replicas} CPU replicas but TensorFlow was initialised with "
            f"{len(devices)} CPU devices; choose cpu_replicas before any TensorFlow work"
        )
    return devices[:replicas]


def _check_flags(name: str, num_gpus: int | None, cpu_replicas: int) -> None:
    if name not in STRATEGIES:
        raise StrategyError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    # Physical devices can be listed without starting the runtime (see module docstring).
    physical_gpus = len(tf.config.list_physical_devices("GPU"))
    if num_gpus is not None and num_gpus > physical_gpus:
        raise StrategyError(f"--num_gpus={num_gpus} but only {physical_gpus} GPUs are visible")
    if cpu_replicas > 1 and name in ("one_device", "multi_worker", "tpu"):
        raise StrategyError(
            f"--cpu_replicas={cpu_replicas} splits one machine's CPU for the mirrored "
            f"strategy; it contradicts --strategy={name} (drop one of the two flags)"
        )


def _limit_gpus(num_gpus: int | None) -> None:
    """Makes only the first `num_gpus` GPUs visible to a multi-worker task."""
    if num_gpus is None:
        return
    gpus = tf.config.list_physical_devices("GPU")
    try:
        tf.config.set_visible_devices(gpus[:num_gpus], "GPU")
    except RuntimeError:
        raise StrategyError(
            "--num_gpus must be applied before TensorFlow starts; call make_strategy "
            "before any other TensorFlow work"
        ) from None


def make_strategy(
    name: str = "auto", num_gpus: int | None = None, cpu_replicas: int = 1
) -> tf.distribute.Strategy:
    """Returns the tf.distribute strategy that `name` describes (see module docstring).

    Raises:
        StrategyError: for an unknown name, more GPUs than are visible,
            `cpu_replicas` > 1 with a strategy other than "auto" or "mirrored", a
            TF_CONFIG that is not JSON, or device settings asked for after TensorFlow
            started.
    """
    _check_flags(name, num_gpus, cpu_replicas)
    if name == "auto" and _has_cluster():
        name = "multi_worker"
    if name == "multi_worker":
        _limit_gpus(num_gpus)
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    # Physical devices only until the CPU is split: listing logical devices starts the runtime.
    visible_gpus = len(tf.config.list_physical_devices("GPU"))
    if num_gpus is not None:
        visible_gpus = min(visible_gpus, num_gpus)
    if name == "auto":
        name = "mirrored" if visible_gpus > 1 or cpu_replicas > 1 else "one_device"
    if name == "mirrored" and not visible_gpus:
        return tf.distribute.MirroredStrategy(
            split_cpu(max(cpu_replicas, 1)), cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    gpus = [device.name for device in tf.config.list_logical_devices("GPU")][:visible_gpus]
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(gpus)
    if gpus:
        return tf.distribute.OneDeviceStrategy(gpus[0])
    return tf.distribute.get_strategy()
