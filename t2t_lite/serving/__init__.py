"""Serving exported models over TensorFlow Serving's REST API.

The server's process loads nothing itself and imports no model code: each version is
loaded by a worker process of its own, as a SavedModel (which behaves as TensorFlow
Serving would with the same files) or as a CTranslate2 export with the same signatures.

The names below are imported when first used, so that a version's worker process can
import `t2t_lite.serving.worker` and quiet TensorFlow's start-up before it loads.
"""

import importlib

_HOMES = {
    "Batcher": "batching",
    "LoadedModel": "loading",
    "load_version": "loading",
    "ModelStore": "model_store",
    "PredictRequest": "rest",
    "RequestError": "rest",
    "TensorInfo": "rest",
    "parse_predict": "rest",
    "ModelServer": "server",
    "ServerConfig": "server",
    "serve": "server",
    "WorkerFailed": "worker",
    "WorkerModel": "worker",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
