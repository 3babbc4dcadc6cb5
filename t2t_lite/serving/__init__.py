"""Serving exported SavedModels over TensorFlow Serving's REST API.

Only SavedModels are loaded: nothing here imports the model code, so the server behaves
as TensorFlow Serving would with the same files.
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
