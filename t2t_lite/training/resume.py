"""Where a run's checkpoints go, and how a run resumes from them.

A run that resumes at step k restores the newest readable checkpoint of `output_dir`
(checked against the model first; an unreadable newer one is set aside with a warning)
and shuffles the training data with a seed derived from
(`seed`, k): it does not replay the batches the run before it started with, and two
resumes from the same checkpoint still see the same batches.
"""

from __future__ import annotations

import hashlib
import itertools
import os

import tensorflow as tf

from t2t_lite.runs import checkpoints
from t2t_lite.runs.run_dir import RunDirError
from t2t_lite.training import saving

UNREADABLE_FOLDER = "unreadable"


def data_seed(seed: int, start_step: int) -> int:
    """The shuffling seed of a run that starts at `start_step`: `seed` itself from scratch.

    A resumed run gets a seed of its own for each start step (see the module docstring).
    """
    if start_step == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{start_step}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def restore_latest(checkpoint, output_dir: str, printer=print, move_aside: bool = False):
    """Restores the newest readable checkpoint of `output_dir` into `checkpoint`; its path.

    The checkpoints that `output_dir`'s state file lists are tried newest first. Each one's
    variables are compared with the model's first (names and shapes,
    `checkpoints.checkpoint_mismatches`), so a checkpoint of another model is refused
    before anything is restored. One that cannot be read (truncated or missing files) is
    skipped with one warning line and never restored; with `move_aside` (the chief, which
    owns the folder) its files go to `output_dir/unreadable/` and the state file stops
    listing it, so that decoding and averaging do not pick it either.

    Raises:
        RunDirError: when the newest readable checkpoint does not fit the model, or when
            checkpoints are listed but none of them can be read.
    """
    candidates = _listed_checkpoints(output_dir)
    unreadable = []
    for path in candidates:
        problem = _restore(checkpoint, path)
        if problem is None:
            if unreadable:
                names = "; ".join(f"{bad} ({why})" for bad, why in unreadable)
                kept = f"; its files are kept in {_aside(output_dir)}" if move_aside else ""
                printer(
                    f"warning: skipping unreadable checkpoint {names}; resuming from {path}, "
                    f"the newest readable one{kept}"
                )
                if move_aside:
                    _set_aside(output_dir, [bad for bad, _ in unreadable])
            return path
        unreadable.append((path, problem))
    if unreadable:
        listed = "; ".join(f"{path} ({problem})" for path, problem in unreadable)
        raise RunDirError(
            f"cannot resume: no checkpoint of {output_dir} can be read: {listed}. Copy the "
            "checkpoint files back if you have them, or train into a new --output_dir"
        )
    return None


def _listed_checkpoints(output_dir: str) -> list:
    """The checkpoint prefixes of `output_dir`'s state file, newest first."""
    state = tf.train.get_checkpoint_state(output_dir)
    if state is None or not state.model_checkpoint_path:
        return []
    paths = list(state.all_model_checkpoint_paths)
    if state.model_checkpoint_path not in paths:
        paths.append(state.model_checkpoint_path)
    return [
        path if os.path.isabs(path) else os.path.join(output_dir, path) for path in reversed(paths)
    ]


def _restore(checkpoint, path: str) -> str | None:
    """Restores `path`; None when done, or why it cannot be read. Refuses another model."""
    refusal = (
        f"cannot resume from {path}: it does not fit the model these hparams build "
        "({}); it may come from another t2t_lite release. Train into a new --output_dir."
    )
    if not tf.io.gfile.exists(path + ".index"):
        return "its .index file is missing"
    try:
        mismatches, total = checkpoints.checkpoint_mismatches(checkpoint.model, path)
    except checkpoints.CheckpointError as error:
        return _first_line(error)
    if mismatches:
        raise RunDirError(refusal.format(checkpoints.describe_mismatches(mismatches, total)))
    try:
        checkpoint.restore(path).assert_existing_objects_matched()
    except (AssertionError, ValueError) as error:
        raise RunDirError(refusal.format(_first_line(error))) from None
    except tf.errors.OpError as error:
        # The index names every variable but the data cannot be read: a truncated or
        # damaged .data file. Restoring an older checkpoint then overwrites all of them.
        return _first_line(error)
    return None


def _first_line(error) -> str:
    return str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__


def _aside(output_dir: str) -> str:
    return os.path.join(output_dir, UNREADABLE_FOLDER)


def _set_aside(output_dir: str, paths: list) -> None:
    """Moves the files of checkpoints `paths` to `unreadable/` and drops them from the state."""
    folder = _aside(output_dir)
    os.makedirs(folder, exist_ok=True)
    for path in paths:
        for name in tf.io.gfile.glob(path + ".*"):
            target = os.path.join(folder, os.path.basename(name))
            if os.path.exists(target):  # set aside before: keep both
                target += f".{len(os.listdir(folder))}"
            os.replace(name, target)
    state = tf.train.get_checkpoint_state(output_dir)
    gone = {os.path.basename(path) for path in paths}
    kept = [
        (path, stamp)
        for path, stamp in itertools.zip_longest(
            state.all_model_checkpoint_paths, state.all_model_checkpoint_timestamps
        )
        if os.path.basename(path) not in gone
    ]
    tf.compat.v1.train.update_checkpoint_state(
        output_dir,
        kept[-1][0],
        [path for path, _ in kept],
        all_model_checkpoint_timestamps=(
            [stamp for _, stamp in kept] if all(stamp is not None for _, stamp in kept) else None
        ),
        last_preserved_timestamp=state.last_preserved_timestamp,
    )


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


def checkpoint_manager(model, optimizer, output_dir, keep, checkpoint=None):
    """(checkpoint of model and optimizer, its manager saving into `output_dir`)."""
    checkpoint = checkpoint or tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, output_dir, max_to_keep=keep, step_counter=optimizer.iterations
    )
    return checkpoint, manager


def resume_or_start(model, optimizer, checkpoint_dir: str, output_dir: str, keep: int, printer):
    """(checkpoint, its manager, the restored checkpoint's path or None) of a starting run.

    Leftovers of killed saves are removed from `checkpoint_dir` first. Every worker
    resumes from the chief's newest readable checkpoint (they hold the same weights); the
    manager is made afterwards, so that it starts from the state file restoring left.
    """
    saving.remove_save_leftovers(checkpoint_dir, printer)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    chief = os.path.abspath(checkpoint_dir) == os.path.abspath(output_dir)
    latest = restore_latest(checkpoint, output_dir, printer, move_aside=chief)
    _, manager = checkpoint_manager(model, optimizer, checkpoint_dir, keep, checkpoint)
    return checkpoint, manager, latest
