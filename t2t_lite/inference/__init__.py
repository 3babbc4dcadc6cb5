"""Using a trained model: restoring it from a run and searching with it."""

from t2t_lite.inference.restore import RestoreError, TrainedModel, load_trained_model
from t2t_lite.inference.translator import SearchConfig, Translator, strip_ids

__all__ = [
    "RestoreError",
    "SearchConfig",
    "TrainedModel",
    "Translator",
    "load_trained_model",
    "strip_ids",
]
