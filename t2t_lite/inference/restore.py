"""Rebuilding a trained model from an output_dir for decoding and export.

The model's hparams come from the run's `hparams.json`; an explicit hparams set that
disagrees with it on the model's shape is refused before any weight is read, with a
message naming the fields, instead of a shape error from deep inside TensorFlow.

A checkpoint given explicitly (`--checkpoint_path`) may still come from another model. Its
variables are compared with the model's before restoring: the checkpoint's object graph
(the `_CHECKPOINTABLE_OBJECT_GRAPH` entry that object-based restore itself follows) is walked
from its `model` node alongside the model's own trackable children, and every variable is
looked up by that path, so names and shapes are checked without reading a weight, and a
mismatch is one `RestoreError` instead of one TensorFlow warning per unmatched value.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import keras
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from t2t_lite import hparams as hparams_lib
from t2t_lite import problems as problems_lib
from t2t_lite.models import build_transformer
from t2t_lite.training import run_dir

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_ATTRIBUTE = "VARIABLE_VALUE"
SHOWN_MISMATCHES = 3


class RestoreError(ValueError):
    """The checkpoint cannot serve this request; the message says why and what to do."""


@dataclasses.dataclass
class TrainedModel:
    model: keras.Model
    hp: hparams_lib.HParams
    problem: problems_lib.Problem
    checkpoint_path: str


def resolve_hparams(output_dir: str, hparams_set: str | None, overrides: str = ""):
    """The run's hparams, checked against `hparams_set` + `overrides` when those are given."""
    saved = run_dir.load_hparams(output_dir) if output_dir else None
    if hparams_set:
        asked = hparams_lib.override(hparams_lib.get(hparams_set), overrides)
        if saved is not None:
            before, now = saved.model_fields(), asked.model_fields()
            changed = [f"{k}={before[k]} (asked {now[k]})" for k in now if before[k] != now[k]]
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
        dataclasses.replace(hp, dtype_policy="float32"), vocab_size, target_vocab_size
    )
    mismatches, total = checkpoint_mismatches(model, path)
    if mismatches:
        shown = "; ".join(mismatches[:SHOWN_MISMATCHES])
        more = len(mismatches) - SHOWN_MISMATCHES
        raise RestoreError(
            f"checkpoint {path} does not fit a {problem_name} model with these hparams "
            f"(vocab {vocab_size}): {len(mismatches)} variables differ (the model has {total}), "
            f"e.g. {shown}{f' (and {more} more)' if more > 0 else ''}. "
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


def checkpoint_mismatches(model: keras.Model, path: str) -> tuple[list[str], int]:
    """Compares the variables of checkpoint `path` with `model`'s, by name and shape.

    A variable's name is its path of attribute names from the model (as in
    "model/decoder_layer_0/self_attention/query/kernel"), the path object-based restore
    follows; the checkpoint's value for it is found through the checkpoint's object graph,
    whatever key it was saved under (a model trained with an optimizer saves most weights
    under the optimizer's keys).

    Args:
        model: the built model to restore into.
        path: a checkpoint prefix written by `tf.train.Checkpoint(model=..., ...)`.

    Returns:
        (mismatches, count): one "name: expected [shape], found [shape]" (or "missing in
        the checkpoint", or "not in the model") per disagreeing variable, in a fixed order,
        and the number of the model's variables.

    Raises:
        RestoreError: if `path` is unreadable, not an object-based checkpoint, or has no
            `model`.
    """
    graph, shapes = _read_object_graph(path)
    model_node = _child_nodes(graph, 0).get("model")
    if model_node is None:
        raise RestoreError(
            f"checkpoint {path} saves no object named 'model' (it holds "
            f"{sorted(_child_nodes(graph, 0))}); it is not a t2t_lite training checkpoint"
        )
    mismatches, count, seen = [], 0, set()
    stack = [(model, model_node, "model")]
    while stack:
        obj, node, name = stack.pop()
        if node is not None and node in seen:
            continue
        if node is not None:
            seen.add(node)
        if isinstance(obj, (keras.Variable, tf.Variable)):
            count += 1
            key = _variable_key(graph, node)
            found = shapes.get(key) if key else None
            if found is None:
                mismatches.append(f"{name}: missing in the checkpoint")
            elif list(found) != list(obj.shape):
                mismatches.append(f"{name}: expected {list(obj.shape)}, found {list(found)}")
            continue
        children = tf.train.TrackableView.children(obj)
        saved = _child_nodes(graph, node) if node is not None else {}
        for child_name in sorted(children, reverse=True):
            stack.append((children[child_name], saved.get(child_name), f"{name}/{child_name}"))
        for extra in sorted(set(saved) - set(children)):
            for extra_name, extra_key in _saved_variables(graph, saved[extra], f"{name}/{extra}"):
                mismatches.append(
                    f"{extra_name}: not in the model (found {list(shapes[extra_key])})"
                )
    return mismatches, count


def _read_object_graph(path: str):
    """(object graph proto, variable -> shape) of checkpoint `path`; RestoreError if unreadable."""
    try:
        reader = tf.train.load_checkpoint(path)
        if not reader.has_tensor(OBJECT_GRAPH_KEY):
            raise RestoreError(
                f"checkpoint {path} has no object graph ({OBJECT_GRAPH_KEY}): it was not "
                "written by tf.train.Checkpoint (t2t_lite's trainer or avg_checkpoints); "
                "point --checkpoint_path at a t2t_lite checkpoint"
            )
        graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
            reader.get_tensor(OBJECT_GRAPH_KEY)
        )
        return graph, reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError, IndexError) as error:
        if isinstance(error, RestoreError):
            raise
        raise RestoreError(
            f"checkpoint {path} cannot be read ({str(error).splitlines()[0][:200]}); its "
            "files may be incomplete: copy its .index and .data-* files again or pick another"
        ) from None


def _child_nodes(graph, node: int) -> dict[str, int]:
    return {child.local_name: child.node_id for child in graph.nodes[node].children}


def _variable_key(graph, node: int | None) -> str | None:
    if node is None:
        return None
    for attribute in graph.nodes[node].attributes:
        if attribute.name == VARIABLE_ATTRIBUTE:
            return attribute.checkpoint_key
    return None


def _saved_variables(graph, node: int, name: str) -> Iterator[tuple[str, str]]:
    """(name, checkpoint key) of every variable saved under `node`, depth first."""
    stack, seen = [(node, name)], set()
    while stack:
        node, name = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        key = _variable_key(graph, node)
        if key:
            yield name, key
        children = _child_nodes(graph, node)
        for child in sorted(children, reverse=True):
            stack.append((children[child], f"{name}/{child}"))


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
