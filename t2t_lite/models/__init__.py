"""Models built from t2t_lite.layers."""

from t2t_lite.models.build import build_transformer
from t2t_lite.models.ensemble import COMBINATIONS, Ensemble, EnsembleError
from t2t_lite.models.transformer import Transformer, shift_targets_right

__all__ = [
    "COMBINATIONS",
    "Ensemble",
    "EnsembleError",
    "Transformer",
    "build_transformer",
    "shift_targets_right",
]
