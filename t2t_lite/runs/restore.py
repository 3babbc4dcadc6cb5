"""Rebuilding a trained model from an output_dir for decoding and export.

The model's hparams come from the run's `hparams.json`; an explicit hparams set that
disagrees with it on the model's shape is refused before any weight is read, with a
message naming the fields, instead of a shape error from deep inside TensorFlow.

A checkpoint given explicitly (`--checkpoint_path`) may still come from another model. Its
variables are compared with the model's before restoring (`training.checkpoints`), so a
mismatch is one `RestoreError` instead of one TensorFlow warning per unmatched value.
"""

from __future__ import annotations

import dataclasses
import os

import keras
import tensorflow as tf

from t2t_lite import hparams as hparams_lib
from t2t_lite import problems as problems_lib
from t2t_lite.models import build_transformer
from t2t_lite.runs import checkpoints, run_dir


class RestoreError(ValueError):
    """The checkpoint cannot serve this request; the message says why and what to do."""


@dataclasses.dataclass
class TrainedModel:
    """A restored model and what it was trained as.

    Attributes:
        model: the Transformer, or an `Ensemble` of several (`runs.ensemble.load_models`).
        hp: its hparams (an ensemble's: the first member's, with the smallest max_position).
        problem: the problem.
        checkpoint_path: the checkpoint restored (an ensemble's: every member's, joined by ",").
        members: an ensemble's TrainedModel per member; () for a single model.
    """

    model: keras.Model
    hp: hparams_lib.HParams
    problem: problems_lib.Problem
    checkpoint_path: str
    members: tuple = ()


def resolve_hparams(output_dir: str, hparams_set: str | None, overrides: str = ""):
    """The run's hparams, checked against `hparams_set` + `overrides` when those are given."""
    saved = run_dir.load_hparams(output_dir) if output_dir else None
    if hparams_set:
        asked = hparams_lib.override(hparams_lib.get(hparams_set), overrides)
        if saved is not None:
            changed = [f"{k}={b} (asked {a})" for k, b, a in saved.model_changes(asked)]
            if changed:
                raise RestoreError(
                    f"{output_dir} was trained with other model hparams: {', '.join(changed)}; "
                    "drop --hparams_set to use the run's own hparams.json, or point "
                    "--output_dir at a run of this hparams set"
                )
        return asked
    if saved is None:
        raise RestoreError(
            f"{output_dir or '(no --output_dir)'} has no {run_dir.HPARAMS_FILE}; pass "
            "--hparams_set (and --hparams) describing the checkpoint's model"
        )
    return hparams_lib.override(saved, overrides)


def find_checkpoint(output_dir: str, checkpoint_path: str | None) -> str:
    """`checkpoint_path` (a prefix or a folder), else the newest checkpoint of `output_dir`."""
    if checkpoint_path:
        if os.path.isdir(checkpoint_path):
            found = tf.train.latest_checkpoint(checkpoint_path)
            if not found:
                raise RestoreError(f"no checkpoint in folder {checkpoint_path}")
            return found
        if not tf.io.gfile.exists(checkpoint_path + ".index"):
            raise RestoreError(f"checkpoint {checkpoint_path} does not exist (no .index file)")
        return checkpoint_path
    found = tf.train.latest_checkpoint(output_dir) if output_dir else None
    if not found:
        raise RestoreError(
            f"no checkpoint in {output_dir or '(no --output_dir)'}; train first or pass "
            "--checkpoint_path"
        )
    return found


def load_trained_model(
    problem_name: str,
    data_dir: str,
    output_dir: str,
    checkpoint_path: str | None = None,
    hparams_set: str | None = None,
    overrides: str = "",
) -> TrainedModel:
    """Builds the model of a run and restores its weights (the optimizer is not needed).

    Raises:
        RestoreError: missing hparams or checkpoint, hparams that do not match, or a
            checkpoint whose variables (names and shapes) are not the model's.
    """
    problem = problems_lib.get(problem_name)
    hp = resolve_hparams(output_dir, hparams_set, overrides)
    path = find_checkpoint(output_dir, checkpoint_path)
    vocab_size, target_vocab_size = problem.vocab_sizes(data_dir)
    keras.mixed_precision.set_dtype_policy("float32")
    model = build_transformer(
        dataclasses.replace(hp, dtype_policy="float32"),
        vocab_size,
        target_vocab_size,
        problem.target_non_copy_ids(data_dir),
    )
    try:
        mismatches, total = checkpoints.checkpoint_mismatches(model, path)
    except checkpoints.CheckpointError as error:
        raise RestoreError(str(error)) from None
    if mismatches:
        raise RestoreError(
            f"checkpoint {path} does not fit a {problem_name} model with these hparams "
            f"(vocab {vocab_size}): {checkpoints.describe_mismatches(mismatches, total)}. "
            f"{_what_to_do(output_dir, path)}"
        )
    checkpoint = tf.train.Checkpoint(model=model)
    try:
        status = checkpoint.restore(path)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise RestoreError(
            f"checkpoint {path} does not fit a {problem_name} model with these hparams "
            f"(vocab {vocab_size}): {str(error).splitlines()[0][:300]}"
        ) from None
    return TrainedModel(model=model, hp=hp, problem=problem, checkpoint_path=path)


def _what_to_do(output_dir: str, path: str) -> str:
    folder = os.path.dirname(path)
    for candidate in (folder, os.path.dirname(folder)):
        same = output_dir and os.path.abspath(candidate) == os.path.abspath(output_dir)
        if candidate and not same and os.path.exists(os.path.join(candidate, run_dir.HPARAMS_FILE)):
            return (
                f"Its folder {candidate} has a hparams.json, presumably of the run that wrote "
                f"it: pass --output_dir={candidate} (and no --hparams_set) to use that model"
            )
    return (
        "Pass --output_dir of the run that wrote it (its hparams.json describes the model); "
        "without that folder, pass an empty --output_dir with the --hparams_set and --hparams "
        "it was trained with"
    )


# Dtypes a trained model can be searched in: its float32 weights, or a bfloat16 copy.
DECODE_DTYPES = ("float32", "bfloat16")


def in_decode_dtype(trained: TrainedModel, dtype: str) -> TrainedModel:
    """`trained`, or a copy whose weights and computation are in `dtype`.

    A "bfloat16" copy holds every weight rounded to bfloat16 and computes in bfloat16
    (Keras's "bfloat16" policy): the matrix products run at bfloat16 speed on CPUs with
    bfloat16 instructions (AVX512_BF16, AMX) and on GPUs and TPUs. Layer normalisation,
    softmax and the logits stay float32 (the layers compute them so in any policy).
    """
    if dtype not in DECODE_DTYPES:
        raise RestoreError(f"decode dtype must be one of {list(DECODE_DTYPES)}, got {dtype!r}")
    if dtype == "float32":
        return trained
    if trained.members:
        members = tuple(in_decode_dtype(member, dtype) for member in trained.members)
        model = trained.model.with_models([member.model for member in members])
        return dataclasses.replace(trained, model=model, members=members)
    source = trained.model
    copy = build_transformer(
        dataclasses.replace(trained.hp, dtype_policy=dtype),
        source.vocab_size,
        source.target_vocab_size,
        source.non_copy_ids or None,
    )
    for target, value in zip(_weights(copy), _weights(source), strict=True):
        if target.path != value.path or tuple(target.shape) != tuple(value.shape):
            raise RestoreError(f"cannot copy {value.path} into {target.path} of the {dtype} model")
        target.assign(tf.cast(value, target.dtype))
    return dataclasses.replace(trained, model=copy)


def _weights(model) -> list:
    """The model's weights, without the dropout layers' random-seed states."""
    return [variable for variable in model.variables if "seed_generator" not in variable.path]
