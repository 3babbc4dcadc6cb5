"""Models built from t2t_lite.layers."""

from t2t_lite.models.build import build_transformer
from t2t_lite.models.transformer import Transformer, shift_targets_right

__all__ = ["Transformer", "build_transformer", "shift_targets_right"]
