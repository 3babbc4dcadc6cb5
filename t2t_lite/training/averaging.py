"""Checkpoint averaging: the mean of the last N checkpoints of a run, as a real checkpoint.

The paper (section 6.1) evaluates "a single model obtained by averaging the last 5 checkpoints"
for the base models and the last 20 for the big ones. Averaging here knows nothing about the
model: it reads the checkpoints listed in OUTPUT_DIR/checkpoint with `tf.train.load_checkpoint`
and, key by key,

- floating-point tensors (weights, Adam moments, a float learning rate) become the arithmetic
  mean over the N checkpoints, accumulated in float64 and cast back to their own dtype;
- every other tensor (step counters, seed states, and `_CHECKPOINTABLE_OBJECT_GRAPH`, the
  serialized object graph that object-based restore needs) is copied from the newest one.

The result is written with `tf.raw_ops.SaveV2` under the newest checkpoint's name, by default to
OUTPUT_DIR/averaged/ckpt-<newest step>, with its own `checkpoint` state file, so that
`tf.train.latest_checkpoint(OUTPUT_DIR + "/averaged")` finds it and
`tf.train.Checkpoint(model=..., optimizer=...).restore(path)` loads it like any other checkpoint.
The trainer's OUTPUT_DIR/best (`best`) has the same layout: averaging reads it as a run.

Fewer checkpoints than asked for is an error unless `allow_fewer=True`, in which case the ones
that exist are averaged and a warning says how many: averaging 3 instead of 20 is a different
model, and the paper's numbers need exactly N.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from absl import logging

AVERAGED_SUBDIR = "averaged"
PROVENANCE_FILE = "averaging.json"


def last_checkpoints(output_dir: str, num_last: int, allow_fewer: bool = False) -> list[str]:
    """The newest `num_last` checkpoint prefixes listed in `output_dir/checkpoint`, oldest first.

    Args:
        output_dir: The training run's directory (written by tf.train.CheckpointManager).
        num_last: How many of the newest checkpoints to return.
        allow_fewer: If True and fewer exist, return all of them (with a warning) instead of
            raising.

    Returns:
        Checkpoint prefixes such as ".../ckpt-1000", oldest first.

    Raises:
        ValueError: If `num_last` < 1, or fewer than `num_last` checkpoints exist and
            `allow_fewer` is False.
        FileNotFoundError: If there is no checkpoint state file or a listed checkpoint is gone.
    """
    if num_last < 1:
        raise ValueError(f"num_last must be at least 1, got {num_last}.")
    state = tf.train.get_checkpoint_state(output_dir)
    if state is None or not state.all_model_checkpoint_paths:
        raise FileNotFoundError(
            f"No checkpoints in {output_dir!r}: there is no 'checkpoint' state file listing any. "
            "Pass the --output_dir the trainer wrote to."
        )
    paths = list(state.all_model_checkpoint_paths)
    if len(paths) < num_last:
        message = (
            f"{output_dir!r} lists {len(paths)} checkpoint(s) ({', '.join(map(_name, paths))}) "
            f"but {num_last} were asked for."
        )
        if not allow_fewer:
            raise ValueError(
                f"{message} Train longer, keep more checkpoints (the trainer's "
                f"--keep_checkpoints must be at least {num_last}), lower --num_last, or pass "
                "--allow_fewer to average the ones that exist."
            )
        logging.warning("%s Averaging all %d of them (allow_fewer).", message, len(paths))
    chosen = paths[-num_last:]
    for path in chosen:
        if not tf.io.gfile.exists(path + ".index"):
            raise FileNotFoundError(
                f"{os.path.join(output_dir, 'checkpoint')} lists {path!r}, but {path}.index does "
                "not exist; the run directory is incomplete (deleted or partly copied files)."
            )
    return chosen


def _name(path: str) -> str:
    return os.path.basename(path)


def _check_same_variable(key: str, maps: tuple, path: str, newest_maps: tuple, newest_path: str):
    """Raises if `key` is missing from `path` or has another shape or dtype than in the newest.

    `maps` and `newest_maps` are (variable -> shape, variable -> dtype) of the two checkpoints.
    """
    (shapes, dtypes), (newest_shapes, newest_dtypes) = maps, newest_maps
    if key not in shapes:
        raise ValueError(
            f"Variable {key!r} is in {newest_path} but not in {path}; checkpoints of different "
            "models (or of a model that changed between saves) cannot be averaged."
        )
    if shapes[key] != newest_shapes[key]:
        raise ValueError(
            f"Variable {key!r} has shape {shapes[key]} in {path} but {newest_shapes[key]} in "
            f"{newest_path}; checkpoints of different model configurations cannot be averaged."
        )
    if dtypes[key] != newest_dtypes[key]:
        raise ValueError(
            f"Variable {key!r} is {dtypes[key].name} in {path} but {newest_dtypes[key].name} in "
            f"{newest_path}."
        )


def average_checkpoints(paths: Sequence[str]) -> tuple[dict[str, np.ndarray], dict[str, tf.DType]]:
    """Averages the floating-point tensors of `paths`; copies the others from the newest.

    Args:
        paths: Checkpoint prefixes, oldest first; the last one is the newest and defines the
            set of keys.

    Returns:
        (values, dtypes): for every key of the newest checkpoint, its averaged (float) or copied
        (non-float) value as a numpy array (bytes for strings), and its dtype.

    Raises:
        ValueError: If `paths` is empty, a checkpoint cannot be read (the message names it),
            or a float variable is missing from one checkpoint or has another shape or dtype
            there (the message names the variable and both files).
    """
    if not paths:
        raise ValueError("average_checkpoints needs at least one checkpoint path, got none.")
    readers = [_reader(path) for path in paths]
    maps = [(r.get_variable_to_shape_map(), r.get_variable_to_dtype_map()) for r in readers]
    newest, newest_path = readers[-1], paths[-1]
    shapes, dtypes = maps[-1]
    values = {}
    for key in sorted(shapes):
        if not dtypes[key].is_floating:
            # Read from the older ones too, only to find a truncated file among them.
            for path, reader, (older_shapes, _) in zip(paths, readers, maps[:-1]):
                if key in older_shapes:
                    _tensor(reader, key, path)
            values[key] = _tensor(newest, key, newest_path)
            continue
        total = np.zeros(shapes[key], dtype=np.float64)
        for path, reader, reader_maps in zip(paths, readers, maps):
            _check_same_variable(key, reader_maps, path, maps[-1], newest_path)
            total += np.asarray(_tensor(reader, key, path)).astype(np.float64)
        values[key] = (total / len(paths)).astype(dtypes[key].as_numpy_dtype)
    return values, dtypes


def _unreadable(path: str, error: Exception) -> ValueError:
    cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return ValueError(
        f"cannot read checkpoint {path} ({cause}): its files are damaged (truncated or "
        "partly copied). Copy them again, or leave it out: lower --num_last so that it is "
        "not among the newest, or average a run folder that does not list it."
    )


def _reader(path: str):
    try:
        return tf.train.load_checkpoint(path)
    except (tf.errors.OpError, IndexError, ValueError) as error:
        raise _unreadable(path, error) from None


def _tensor(reader, key: str, path: str) -> np.ndarray:
    # A truncated .data file surfaces here, as an IndexError from the bundle reader.
    try:
        return reader.get_tensor(key)
    except (tf.errors.OpError, IndexError, ValueError) as error:
        raise _unreadable(path, error) from None


def save_bundle(prefix: str, values: dict, dtypes: dict[str, tf.DType]) -> None:
    """Writes `values` as a standard TensorFlow checkpoint bundle (`prefix`.index and .data-*).

    Args:
        prefix: Checkpoint prefix, e.g. ".../averaged/ckpt-1000".
        values: Tensor values by checkpoint key.
        dtypes: The dtype of each key (keeps bfloat16, int64, string, ... exactly).
    """
    keys = sorted(values)
    tensors = [tf.constant(values[key], dtype=dtypes[key]) for key in keys]
    tf.raw_ops.SaveV2(
        prefix=prefix, tensor_names=keys, shape_and_slices=[""] * len(keys), tensors=tensors
    )


def write_checkpoint_state(directory: str, name: str) -> None:
    """Writes `directory`/checkpoint (a CheckpointState text proto) naming the one checkpoint.

    The path is relative, so the directory can be moved; `tf.train.get_checkpoint_state`
    resolves it against `directory`.
    """
    quoted = json.dumps(name)  # a "..." string literal, valid in protobuf text format too
    text = f"model_checkpoint_path: {quoted}\nall_model_checkpoint_paths: {quoted}\n"
    with tf.io.gfile.GFile(os.path.join(directory, "checkpoint"), "w") as f:
        f.write(text)


def average_last_checkpoints(
    output_dir: str,
    num_last: int = 5,
    averaged_dir: str | None = None,
    allow_fewer: bool = False,
) -> str:
    """Averages the last `num_last` checkpoints of a run into a restorable checkpoint.

    Args:
        output_dir: The training run's directory.
        num_last: How many of the newest checkpoints to average (paper: 5 base, 20 big).
        averaged_dir: Where to write; defaults to `output_dir`/averaged. Must differ from
            `output_dir` (its state file belongs to the trainer).
        allow_fewer: Average the available checkpoints, with a warning, when fewer than
            `num_last` exist, instead of raising.

    Returns:
        The averaged checkpoint's prefix, `averaged_dir`/ckpt-<newest step>.

    Raises:
        ValueError: On the conditions of `last_checkpoints` and `average_checkpoints`, or if
            `averaged_dir` is `output_dir`.
        FileNotFoundError: If `output_dir` has no checkpoints.
    """
    if averaged_dir is None:
        averaged_dir = os.path.join(output_dir, AVERAGED_SUBDIR)
    if os.path.normpath(averaged_dir) == os.path.normpath(output_dir):
        raise ValueError(
            f"averaged_dir {averaged_dir!r} is the training directory; writing there would "
            "replace the trainer's checkpoint state. Use another directory (default: "
            f"{os.path.join(output_dir, AVERAGED_SUBDIR)!r})."
        )
    paths = last_checkpoints(output_dir, num_last, allow_fewer)
    logging.info("Averaging %d checkpoints: %s", len(paths), ", ".join(map(_name, paths)))
    values, dtypes = average_checkpoints(paths)

    tf.io.gfile.makedirs(averaged_dir)
    name = _name(paths[-1])
    prefix = os.path.join(averaged_dir, name)
    save_bundle(prefix, values, dtypes)
    write_checkpoint_state(averaged_dir, name)
    provenance = {
        "averaged_checkpoint": name,
        "num_averaged": len(paths),
        "sources": list(paths),
        "averaged_keys": sorted(k for k in values if dtypes[k].is_floating),
        "copied_from_newest": sorted(k for k in values if not dtypes[k].is_floating),
    }
    with tf.io.gfile.GFile(os.path.join(averaged_dir, PROVENANCE_FILE), "w") as f:
        f.write(json.dumps(provenance, indent=2) + "\n")
    logging.info("Wrote the average of %d checkpoints to %s", len(paths), prefix)
    return prefix
