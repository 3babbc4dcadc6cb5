"""Where a run's checkpoints go, and how a run resumes from them.

A run that resumes at step k restores the newest checkpoint of `output_dir` (checked
against the model first) and shuffles the training data with a seed derived from
(`seed`, k): it does not replay the batches the run before it started with, and two
resumes from the same checkpoint still see the same batches.
"""

from __future__ import annotations

import hashlib
import os

import tensorflow as tf

from t2t_lite.runs import checkpoints
from t2t_lite.runs.run_dir import RunDirError


def data_seed(seed: int, start_step: int) -> int:
    """The shuffling seed of a run that starts at `start_step`: `seed` itself from scratch.

    A resumed run gets a seed of its own for each start step (see the module docstring).
    """
    if start_step == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{start_step}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def restore_latest(checkpoint, output_dir: str) -> str | None:
    """Restores the newest checkpoint of `output_dir` into `checkpoint`; returns its path.

    The model's variables are compared with the checkpoint's first (names and shapes,
    `checkpoints.checkpoint_mismatches`), so a checkpoint of another model is refused
    before anything is restored.

    Raises:
        RunDirError: when the checkpoint does not fit the model.
    """
    latest = tf.train.latest_checkpoint(output_dir)
    if not latest:
        return None
    refusal = (
        f"cannot resume from {latest}: it does not fit the model these hparams build "
        "({}); it may come from another t2t_lite release. Train into a new --output_dir."
    )
    try:
        mismatches, total = checkpoints.checkpoint_mismatches(checkpoint.model, latest)
    except checkpoints.CheckpointError as error:
        raise RunDirError(refusal.format(error)) from None
    if mismatches:
        raise RunDirError(refusal.format(checkpoints.describe_mismatches(mismatches, total)))
    try:
        checkpoint.restore(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise RunDirError(refusal.format(str(error).splitlines()[0][:300])) from None
    return latest


def worker_dirs(strategy, output_dir: str) -> tuple:
    """(checkpoint folder, whether to write summaries and run files) for this worker.

    Under MultiWorkerMirroredStrategy every worker takes part in saving, but only the
    chief writes into `output_dir`; the others write to a folder of their own.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return output_dir, True
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and not has_chief):
        return output_dir, True
    return os.path.join(output_dir, "workers", f"{task_type}_{task_id}"), False


def checkpoint_manager(model, optimizer, output_dir, keep):
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, output_dir, max_to_keep=keep, step_counter=optimizer.iterations
    )
    return checkpoint, manager
