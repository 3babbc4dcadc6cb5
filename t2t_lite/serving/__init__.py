"""Serving exported models over TensorFlow Serving's REST API.

The server's process loads nothing itself and imports no model code: each version is
loaded by a worker process of its own, as a SavedModel (which behaves as TensorFlow
Serving would with the same files) or as a CTranslate2 export with the same signatures.
"""

from t2t_lite.serving.batching import Batcher
from t2t_lite.serving.model_store import LoadedModel, ModelStore, load_version
from t2t_lite.serving.rest import PredictRequest, RequestError, TensorInfo, parse_predict
from t2t_lite.serving.server import ModelServer, ServerConfig, serve
from t2t_lite.serving.worker import WorkerFailed, WorkerModel

__all__ = [
    "Batcher",
    "LoadedModel",
    "ModelServer",
    "ModelStore",
    "PredictRequest",
    "RequestError",
    "ServerConfig",
    "TensorInfo",
    "WorkerFailed",
    "WorkerModel",
    "load_version",
    "parse_predict",
    "serve",
]
