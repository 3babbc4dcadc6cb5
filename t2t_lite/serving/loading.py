"""Loading one version folder and warming it up: what a version's worker process runs.

A version is a SavedModel (`saved_model.pb`), loaded with `tf.saved_model.load` as
TensorFlow Serving would load the same files, or a CTranslate2 export
(`ctranslate2_version`), which answers the same signatures. Only the worker process of a
version (`worker.py`) imports this module: the server's own process never loads a model.

TensorFlow Text is imported when installed so that SavedModels with its tokenizer ops
load, as they do in stock TensorFlow Serving, which links those ops.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf
from google.protobuf import json_format
from tensorflow.core.protobuf import saved_model_pb2

from t2t_lite.serving import ctranslate2_version
from t2t_lite.serving.rest import TensorInfo, parse_predict

try:  # Registers the tokenizer ops (SentencepieceOp, ...) that text SavedModels use.
    import tensorflow_text  # noqa: F401
except ImportError:  # pragma: no cover - then only SavedModels without them load.
    pass

WARMUP_FILE = os.path.join("assets.extra", "t2t_lite_warmup.json")


def _tensor_info(name: str, spec) -> TensorInfo:
    shape = tuple(spec.shape.as_list()) if spec.shape.rank is not None else ()
    return TensorInfo(name, spec.dtype.name, shape)


@dataclasses.dataclass(eq=False)
class LoadedModel:
    """One loaded version.

    Attributes:
        version: the integer version (its folder name).
        path: the version folder.
        module: the object `tf.saved_model.load` returned (keeps the variables alive).
        signatures: {name: {"function", "inputs": {name: TensorInfo}, "outputs": {...}}}.
        signature_defs: the SavedModel's SignatureDefMap as JSON (for the metadata API).
    """

    version: int
    path: str
    module: object
    signatures: dict
    signature_defs: dict

    def run(self, signature_name: str, inputs: dict) -> dict:
        """Calls a signature on {name: np.ndarray}; returns {output name: np.ndarray}."""
        signature = self.signatures[signature_name]
        tensors = {
            name: tf.constant(inputs[name], dtype=info.dtype)
            for name, info in signature["inputs"].items()
        }
        outputs = signature["function"](**tensors)
        # np.asarray: a scalar string's .numpy() is bytes, which has no shape to batch by.
        return {name: np.asarray(value.numpy()) for name, value in outputs.items()}


def load_version(path: str, version: int, calls: int = 1):
    """Loads the SavedModel (or CTranslate2 export) at `path`; describes its signatures.

    `calls`: how many calls may run at once (CTranslate2 sets its threads by it).
    """
    if ctranslate2_version.is_ctranslate2_version(path):
        return ctranslate2_version.CTranslate2Version(path, version, calls)
    module = tf.saved_model.load(path)
    signatures = {}
    for name, function in module.signatures.items():
        _, input_specs = function.structured_input_signature
        signatures[name] = {
            "function": function,
            "inputs": {k: _tensor_info(k, s) for k, s in sorted(input_specs.items())},
            "outputs": {
                k: _tensor_info(k, s) for k, s in sorted(function.structured_outputs.items())
            },
        }
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    signature_defs = {
        name: json_format.MessageToDict(definition, preserving_proto_field_name=True)
        for name, definition in proto.meta_graphs[0].signature_def.items()
    }
    return LoadedModel(version, path, module, signatures, signature_defs)


def warm_up(model) -> int:
    """Runs the predict bodies of the version's warm-up file, if any; returns how many.

    The first call of a signature optimises its graph (seconds for a beam search); doing
    it here keeps that out of the first real requests.
    """
    if isinstance(model, ctranslate2_version.CTranslate2Version):
        return model.warm_up()
    path = os.path.join(model.path, WARMUP_FILE)
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        bodies = json.load(f)
    for body in bodies:
        request = parse_predict(json.dumps(body).encode(), model.signatures)
        model.run(request.signature_name, request.inputs)
    return len(bodies)
