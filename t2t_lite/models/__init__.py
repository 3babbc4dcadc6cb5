"""Models built from t2t_lite.layers."""

from t2t_lite.models.transformer import Transformer, build_transformer, shift_targets_right

__all__ = ["Transformer", "build_transformer", "shift_targets_right"]
