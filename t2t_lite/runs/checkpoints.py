"""Does a checkpoint fit a model? Names and shapes compared without reading a weight.

The checkpoint's object graph (the `_CHECKPOINTABLE_OBJECT_GRAPH` entry that object-based
restore itself follows) is walked from its `model` node alongside the model's own
trackable children, and every variable is looked up by that path. The trainer (resuming)
and the decoder and exporter (restoring) check this before restoring, so a checkpoint
of another model is one message naming the first variables that differ, instead of one
TensorFlow warning per unmatched value. `variable_keys` gives the same walk's checkpoint key
of each model variable to a caller that reads values one by one (warm start).
"""

from __future__ import annotations

from collections.abc import Iterator

import keras
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
VARIABLE_ATTRIBUTE = "VARIABLE_VALUE"
SHOWN_MISMATCHES = 3


class CheckpointError(ValueError):
    """A checkpoint that cannot be read as a t2t_lite training checkpoint."""


def describe_mismatches(mismatches: list[str], total: int) -> str:
    """ "N variables differ (the model has M), e.g. a; b; c (and K more)"."""
    shown = "; ".join(mismatches[:SHOWN_MISMATCHES])
    more = len(mismatches) - SHOWN_MISMATCHES
    return (
        f"{len(mismatches)} variables differ (the model has {total}), e.g. {shown}"
        f"{f' (and {more} more)' if more > 0 else ''}"
    )


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
        CheckpointError: if `path` is unreadable, not an object-based checkpoint, or has no
            `model`.
    """
    graph, shapes = _read_object_graph(path)
    mismatches, count = [], 0
    for name, variable, key in _walk(model, graph, path):
        if variable is None:
            mismatches.append(f"{name}: not in the model (found {list(shapes[key])})")
            continue
        count += 1
        found = shapes.get(key) if key else None
        if found is None:
            mismatches.append(f"{name}: missing in the checkpoint")
        elif list(found) != list(variable.shape):
            mismatches.append(f"{name}: expected {list(variable.shape)}, found {list(found)}")
    return mismatches, count


def variable_keys(model: keras.Model, path: str) -> list[tuple[str, object, str | None]]:
    """(name, variable, checkpoint key or None) of every variable of `model`.

    The keys `checkpoint_mismatches` compares, for reading values one by one (warm start
    takes what fits and leaves the rest): `tf.train.load_checkpoint(path).get_tensor(key)`.

    Raises:
        CheckpointError: as `checkpoint_mismatches`.
    """
    graph, _ = _read_object_graph(path)
    return [(name, var, key) for name, var, key in _walk(model, graph, path) if var is not None]


def _walk(model: keras.Model, graph, path: str) -> Iterator[tuple[str, object, str | None]]:
    """The checkpoint's `model` node walked alongside `model`, depth first in a fixed order.

    Yields (name, the model's variable, its checkpoint key or None) for each variable of
    the model, and (name, None, key) for each variable saved where the model has none.
    """
    model_node = _child_nodes(graph, 0).get("model")
    if model_node is None:
        raise CheckpointError(
            f"checkpoint {path} saves no object named 'model' (it holds "
            f"{sorted(_child_nodes(graph, 0))}); it is not a t2t_lite training checkpoint"
        )
    stack, seen = [(model, model_node, "model")], set()
    while stack:
        obj, node, name = stack.pop()
        if node is not None and node in seen:
            continue
        if node is not None:
            seen.add(node)
        if isinstance(obj, (keras.Variable, tf.Variable)):
            yield name, obj, _variable_key(graph, node)
            continue
        children = tf.train.TrackableView.children(obj)
        saved = _child_nodes(graph, node) if node is not None else {}
        for child_name in sorted(children, reverse=True):
            stack.append((children[child_name], saved.get(child_name), f"{name}/{child_name}"))
        for extra in sorted(set(saved) - set(children)):
            for extra_name, extra_key in _saved_variables(graph, saved[extra], f"{name}/{extra}"):
                yield extra_name, None, extra_key


def _read_object_graph(path: str):
    """(object graph proto, variable -> shape) of checkpoint `path`; CheckpointError if unreadable."""
    try:
        reader = tf.train.load_checkpoint(path)
        if not reader.has_tensor(OBJECT_GRAPH_KEY):
            raise CheckpointError(
                f"checkpoint {path} has no object graph ({OBJECT_GRAPH_KEY}): it was not "
                "written by tf.train.Checkpoint (t2t_lite's trainer or avg_checkpoints); "
                "point --checkpoint_path at a t2t_lite checkpoint"
            )
        graph = trackable_object_graph_pb2.TrackableObjectGraph.FromString(
            reader.get_tensor(OBJECT_GRAPH_KEY)
        )
        return graph, reader.get_variable_to_shape_map()
    except (tf.errors.OpError, ValueError, IndexError) as error:
        if isinstance(error, CheckpointError):
            raise
        raise CheckpointError(
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
