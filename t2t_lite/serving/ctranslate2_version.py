"""CTranslate2 version folders, served with the signatures of the SavedModels.

`python -m t2t_lite.exporter --format=ctranslate2` writes versions into the same
`MODEL_DIR/<version>/` layout (`model.bin` and `t2t_lite_export.json` where a SavedModel
has `saved_model.pb`), and the server takes either kind. What such a version answers is
`ctranslate2_service`'s; this module gives it the shape of a loaded SavedModel
(`model_store.LoadedModel`): TensorInfos, SignatureDefs for the metadata API, and input
refusals as InvalidArgumentErrors, which the server answers with 400 as it does for a
SavedModel's failed input checks. The server's process only looks at the files;
CTranslate2 is imported in the version's worker process.
"""

from __future__ import annotations

import os

import tensorflow as tf

from t2t_lite.serving.rest import TensorInfo

# What every CTranslate2 export of t2t_lite.export.ctranslate2_export holds.
_EXPORT_FILES = ("model.bin", "t2t_lite_export.json")


def is_ctranslate2_version(folder: str) -> bool:
    """Whether `folder` holds a complete CTranslate2 export."""
    return all(os.path.isfile(os.path.join(folder, name)) for name in _EXPORT_FILES)


def _signature_def(inputs: dict, outputs: dict) -> dict:
    """A SignatureDef as `json_format.MessageToDict` gives it for a SavedModel."""

    def info(spec: TensorInfo) -> dict:
        dims = [{"size": str(-1 if d is None else d)} for d in spec.shape]
        return {
            "name": spec.name,
            "dtype": f"DT_{spec.dtype.upper()}",
            "tensor_shape": {"dim": dims} if dims else {},
        }

    return {
        "inputs": {name: info(spec) for name, spec in inputs.items()},
        "outputs": {name: info(spec) for name, spec in outputs.items()},
        "method_name": "tensorflow/serving/predict",
    }


class CTranslate2Version:
    """One CTranslate2 version folder, used like `model_store.LoadedModel`.

    Args:
        path: the version folder.
        version: its integer version.
        calls: how many calls may run at once.
    """

    def __init__(self, path: str, version: int, calls: int = 1):
        from t2t_lite.serving import ctranslate2_service

        self.version = version
        self.path = path
        self._refused = ctranslate2_service.RefusedInput
        self._service = ctranslate2_service.CTranslate2Service(path, calls)
        self.signatures = {}
        for name, (inputs, outputs) in self._service.signatures.items():
            self.signatures[name] = {
                "inputs": {k: TensorInfo(k, *spec) for k, spec in sorted(inputs.items())},
                "outputs": {k: TensorInfo(k, *spec) for k, spec in sorted(outputs.items())},
            }
        self.signature_defs = {
            name: _signature_def(entry["inputs"], entry["outputs"])
            for name, entry in self.signatures.items()
        }

    def run(self, signature_name: str, inputs: dict) -> dict:
        """Calls a signature on {name: np.ndarray}; returns {output name: np.ndarray}."""
        try:
            return self._service.run(signature_name, inputs)
        except self._refused as error:
            raise tf.errors.InvalidArgumentError(None, None, str(error)) from None

    def warm_up(self) -> int:
        """Sets CTranslate2 up with one search; returns the number of warm-up calls (1)."""
        self._service.warm_up()
        return 1
